package httpx

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// DecodeJSON decodes body strictly into v. On top of encoding/json's own
// checks (one value, no unknown fields, types as declared) it refuses what
// encoding/json lets through silently and PostgreSQL refuses loudly:
//
//   - text PostgreSQL cannot store: invalid UTF-8, U+0000 (text and jsonb
//     refuse it: SQLSTATE 22021 / 22P05) and an unpaired UTF-16 surrogate
//     escape (encoding/json turns it into U+FFFD, jsonb refuses it);
//   - duplicate object keys ({"amount":1,"amount":500} would mean 500);
//   - keys that name a field in another case ({"Amount":1}: encoding/json
//     matches case-insensitively) and keys of one object that differ only
//     in case;
//   - nesting deeper than MaxJSONDepth (400 body_too_deep), refused by a
//     scan of the raw bytes before any decoder runs.
//
// Every refusal is a 400 problem decided before anything is written; the
// detail names the key but never echoes a Go type or parser message.
//
// The cost is linear in the size of the body, whatever its shape: the
// depth scan allocates nothing, and the key walk keeps its position as a
// stack of at most MaxJSONDepth segments, turned into a field name only
// when a refusal names it. (The walk used to build a longer path string at
// every level: a body nested 100,000 deep, 200 KB, cost gigabytes and
// minutes, quadratic in its depth.)
func DecodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return BadRequest("empty_body", "request body is empty; send a JSON object")
	}
	if p := checkJSONText(body); p != nil {
		return p
	}
	if TooDeep(body) {
		return tooDeep()
	}
	w := walker{b: body}
	err := w.walk(reflect.TypeOf(v))
	var ke *keyError
	if errors.As(err, &ke) {
		return ke.p
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeProblem(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return BadRequest("malformed_json", "request body must hold exactly one JSON object")
	}
	if err != nil {
		// The walker found the text malformed and encoding/json did not:
		// the keys may not all have been checked, so the body is refused
		// (fail closed) rather than decoded unchecked.
		return BadRequest("malformed_json", "request body is not well-formed JSON")
	}
	return nil
}

// MaxJSONDepth is the deepest nesting of arrays and objects a request body
// may have. Every document the API takes is a few levels deep (a post, a
// notify event's data, a workflow's input); 64 leaves room for free-form
// data and bounds the decoders' recursion long before encoding/json's own
// limit (10,000), which it only checks after it has started to build.
const MaxJSONDepth = 64

// TooDeep reports whether the JSON text b nests arrays and objects deeper
// than MaxJSONDepth. It is one pass over the bytes that allocates nothing,
// so every decoder of a request body (DecodeJSON, the idempotency
// fingerprint) can ask it first and stay linear in the body's size.
// Brackets inside strings do not count; b need not be valid JSON.
func TooDeep(b []byte) bool {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > MaxJSONDepth {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}

func tooDeep() *Problem {
	return BadRequest("body_too_deep", "JSON arrays and objects may nest at most %d levels deep", MaxJSONDepth)
}

// textProblem is the answer to text PostgreSQL cannot store.
func textProblem(where string) *Problem {
	return BadRequest("invalid_text",
		"%s must be valid UTF-8 without U+0000 (NUL) or unpaired surrogates", where)
}

// checkJSONText scans the raw body: valid UTF-8, and no \u0000 or unpaired
// surrogate escape inside any string (keys included).
func checkJSONText(b []byte) *Problem {
	if !utf8.Valid(b) {
		return textProblem("the request body")
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case 0:
			return textProblem("strings")
		case '\\':
			if i+1 >= len(b) {
				return nil // the decoder reports the truncation
			}
			if b[i+1] != 'u' {
				i++
				continue
			}
			r, ok := hex4(b, i+2)
			if !ok {
				return nil // malformed escape: a syntax error, reported by the decoder
			}
			switch {
			case r == 0:
				return textProblem("strings")
			case r >= 0xD800 && r <= 0xDBFF: // high surrogate: a low one must follow
				lo, ok := -1, false
				if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
					lo, ok = hex4(b, i+8)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return textProblem("strings")
				}
				i += 11
			case r >= 0xDC00 && r <= 0xDFFF: // a low surrogate on its own
				return textProblem("strings")
			default:
				i += 5
			}
		}
	}
	return nil
}

func hex4(b []byte, at int) (int, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n := 0
	for _, c := range b[at : at+4] {
		n <<= 4
		switch {
		case c >= '0' && c <= '9':
			n |= int(c - '0')
		case c >= 'a' && c <= 'f':
			n |= int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			n |= int(c-'A') + 10
		default:
			return 0, false
		}
	}
	return n, true
}

// CheckText reports whether s is text the database can store (valid UTF-8,
// no NUL). Path and query parameters are checked with it before routing
// reaches a module.
func CheckText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// checkURL refuses a path or query that decodes to text the database
// cannot store (GET /notify/users/x%00y/preferences).
func checkURL(u *url.URL) *Problem {
	if !CheckText(u.Path) {
		return textProblem("the path")
	}
	if u.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return BadRequest("invalid_query", "the query string is malformed")
	}
	for k, vs := range q {
		if !CheckText(k) {
			return textProblem("query parameters")
		}
		for _, v := range vs {
			if !CheckText(v) {
				return textProblem("query parameters")
			}
		}
	}
	return nil
}

// keyError is a key rule broken while walking the document.
type keyError struct{ p *Problem }

func (e *keyError) Error() string { return e.p.Error() }

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// walker reads one JSON value from b, checking object keys against the Go
// type it decodes into. It reads the bytes itself rather than through
// json.Decoder.Token, which allocates for every token (a body of a
// million ones, [1,1,…], cost 100 bytes of garbage per byte); here only
// keys are copied. It checks no more syntax than it needs to find the keys:
// encoding/json decodes the same bytes next and reports any syntax error.
//
// Its position is a stack of segments, never a string: a field name is
// built only when a refusal reports it, so a walk costs the same at every
// depth.
type walker struct {
	b    []byte
	i    int
	path []segment
	keys []string // the keys of the objects being walked, outermost first
}

// segment is one step of the walker's position: an object key, or an
// array element (elem).
type segment struct {
	key  string
	elem bool
}

// errSyntax: the walker could not follow the text; encoding/json says why.
var errSyntax = errors.New("httpx: malformed JSON")

// name renders the position with key appended, the way a client reads a
// field: items[].sku, meta.k.
func (w *walker) name(key string) string {
	var b strings.Builder
	for _, s := range w.path {
		if s.elem {
			b.WriteString("[]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.key)
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.WriteString(key)
	return b.String()
}

// space skips whitespace and reports the next byte (0 at the end).
func (w *walker) space() byte {
	for ; w.i < len(w.b); w.i++ {
		switch c := w.b[w.i]; c {
		case ' ', '\t', '\n', '\r':
		default:
			return c
		}
	}
	return 0
}

// str skips the string that starts at w.i and returns its raw bytes,
// quotes included.
func (w *walker) str() ([]byte, error) {
	start := w.i
	for w.i++; w.i < len(w.b); w.i++ {
		switch w.b[w.i] {
		case '\\':
			w.i++
		case '"':
			w.i++
			return w.b[start:w.i], nil
		}
	}
	return nil, errSyntax
}

// walk reads one value whose Go type is t (nil for free-form data). The
// recursion is as deep as the document, which TooDeep has bounded; the
// check here keeps the bound if a caller ever skips the scan.
func (w *walker) walk(t reflect.Type) error {
	if len(w.path) >= MaxJSONDepth {
		return &keyError{tooDeep()}
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t != reflect.TypeFor[time.Time]() &&
		(reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)) {
		t = nil // its own format (json.RawMessage, custom types): keys are data
	}
	switch w.space() {
	case 0:
		return errSyntax
	case '"':
		_, err := w.str()
		return err
	case '[':
		return w.array(t)
	case '{':
		return w.object(t)
	}
	// A number or a literal: skipped up to the next delimiter; its spelling
	// is encoding/json's to check.
	start := w.i
	for ; w.i < len(w.b); w.i++ {
		switch w.b[w.i] {
		case ',', ']', '}', ' ', '\t', '\n', '\r', '"', '[', '{', ':':
			if w.i == start {
				return errSyntax
			}
			return nil
		}
	}
	return nil
}

func (w *walker) array(t reflect.Type) error {
	w.i++ // [
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	if w.space() == ']' {
		w.i++
		return nil
	}
	w.path = append(w.path, segment{elem: true})
	for {
		if err := w.walk(elem); err != nil {
			return err
		}
		switch w.space() {
		case ',':
			w.i++
		case ']':
			w.i++
			w.path = w.path[:len(w.path)-1]
			return nil
		default:
			return errSyntax
		}
	}
}

// dupAt is the number of keys from which an object's duplicate check uses
// a map instead of comparing each key with the ones before it.
const dupAt = 16

func (w *walker) object(t reflect.Type) error {
	w.i++ // {
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = structFields(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	if w.space() == '}' {
		w.i++
		return nil
	}
	mark := len(w.keys) // this object's keys are w.keys[mark:]
	defer func() { w.keys = w.keys[:mark] }()
	var seen map[string]struct{} // past dupAt keys
	for {
		if w.space() != '"' {
			return errSyntax
		}
		raw, err := w.str()
		if err != nil {
			return err
		}
		var key string
		if bytes.IndexByte(raw, '\\') < 0 {
			key = string(raw[1 : len(raw)-1])
		} else if json.Unmarshal(raw, &key) != nil {
			return errSyntax
		}
		if w.space() != ':' {
			return errSyntax
		}
		w.i++
		mine := w.keys[mark:]
		dup := false
		if seen != nil {
			_, dup = seen[key]
			seen[key] = struct{}{}
		} else {
			for _, k := range mine {
				if k == key {
					dup = true
					break
				}
			}
			if len(mine) == dupAt {
				seen = make(map[string]struct{}, 2*dupAt)
				for _, k := range mine {
					seen[k] = struct{}{}
				}
				seen[key] = struct{}{}
			}
		}
		if dup {
			name := w.name(key)
			return &keyError{BadRequest("duplicate_key", "key %q appears more than once", name).With("field", name)}
		}
		next := elem
		if fields != nil {
			// A struct's keys are its fields: at most len(fields) of them
			// get here, so comparing with each is bounded.
			for _, prev := range mine {
				if strings.EqualFold(prev, key) {
					return &keyError{BadRequest("duplicate_key", "keys %q and %q differ only in case", prev, key).With("field", w.name(key))}
				}
			}
			ft, exact := fields[key]
			if !exact {
				name := w.name(key)
				for fname := range fields {
					if strings.EqualFold(fname, key) {
						return &keyError{BadRequest("unknown_field", "unknown field %q (field names are case-sensitive: %q)", name, fname).With("field", name)}
					}
				}
				return &keyError{BadRequest("unknown_field", "unknown field %q", name).With("field", name)}
			}
			next = ft
		}
		w.keys = append(w.keys, key)
		w.path = append(w.path, segment{key: key})
		if err := w.walk(next); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
		switch w.space() {
		case ',':
			w.i++
		case '}':
			w.i++
			return nil
		default:
			return errSyntax
		}
	}
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// structFields maps each JSON name of struct t to its Go type, following
// encoding/json's rules for tags and embedded structs.
func structFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range structFields(et) {
					if _, ok := m[k]; !ok {
						m[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = ft
	}
	fieldCache.Store(t, m)
	return m
}
