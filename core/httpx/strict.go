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
//     in case.
//
// Every refusal is a 400 problem decided before anything is written; the
// detail names the key but never echoes a Go type or parser message.
func DecodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return BadRequest("empty_body", "request body is empty; send a JSON object")
	}
	if p := checkJSONText(body); p != nil {
		return p
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := walk(dec, reflect.TypeOf(v), ""); err != nil {
		if errors.Is(err, io.EOF) { // the body is not empty: it was cut short
			err = io.ErrUnexpectedEOF
		}
		return decodeProblem(err)
	}
	dec = json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeProblem(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return BadRequest("malformed_json", "request body must hold exactly one JSON object")
	}
	return nil
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

// walk reads one JSON value from dec, checking object keys against t (the
// Go type the value decodes into; nil for free-form data). Syntax errors
// are returned as the decoder reports them.
func walk(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t != reflect.TypeFor[time.Time]() &&
		(reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)) {
		t = nil // its own format (json.RawMessage, custom types): keys are data
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := walk(dec, elem, path+"[]"); err != nil {
				return err
			}
		}
	case '{':
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
		seen := map[string]string{} // folded → as sent
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			name := key
			if path != "" {
				name = path + "." + key
			}
			if prev, dup := seen[key]; dup && prev == key {
				return &keyError{BadRequest("duplicate_key", "key %q appears more than once", name).With("field", name)}
			}
			seen[key] = key
			if fields != nil {
				folded := strings.ToLower(key)
				if prev, dup := seen["\x00"+folded]; dup {
					return &keyError{BadRequest("duplicate_key", "keys %q and %q differ only in case", prev, key).With("field", name)}
				}
				seen["\x00"+folded] = key
				ft, exact := fields[key]
				if !exact {
					for fname := range fields {
						if strings.EqualFold(fname, key) {
							return &keyError{BadRequest("unknown_field", "unknown field %q (field names are case-sensitive: %q)", name, fname).With("field", name)}
						}
					}
					return &keyError{BadRequest("unknown_field", "unknown field %q", name).With("field", name)}
				}
				if err := walk(dec, ft, name); err != nil {
					return err
				}
				continue
			}
			if err := walk(dec, elem, name); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
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
