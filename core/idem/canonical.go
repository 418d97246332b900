package idem

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// canonical writes the canonical form of one JSON document: the bytes
// json.Marshal gives for the document decoded into `any` with UseNumber
// (members sorted by key, the last of duplicate keys kept, no whitespace,
// numbers as written, strings escaped as encoding/json escapes them). It
// writes them in one pass over the bytes instead of building the tree:
// the tree cost ~30 bytes of live heap per byte of a wide body ([1,1,…]
// decodes into a million boxed values), and every keyed write paid it
// before its handler could refuse the body. Here the cost is the output,
// plus one index entry per member of the object being written.
//
// The form must stay byte-identical to the tree's: a fingerprint recorded
// by one version is compared by the next (a retry across a rollout).
// TestCanonicalFormMatchesTheDecodedTree holds it to that.
type canonical struct {
	in  []byte
	i   int
	out []byte
	tmp []byte // one object's members while they are reordered
	// members of the objects being written, outermost first (one stack,
	// reused by every object, instead of a slice per object)
	members []member
}

// canonicalJSON returns the canonical form of b, or ok=false when b is
// not one JSON value (trailing data after it included).
func canonicalJSON(b []byte) (out []byte, ok bool) {
	c := canonical{in: b, out: make([]byte, 0, len(b))}
	if !c.value() {
		return nil, false
	}
	if c.space(); c.i != len(c.in) {
		return nil, false
	}
	return c.out, true
}

func (c *canonical) space() {
	for c.i < len(c.in) {
		switch c.in[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *canonical) value() bool {
	c.space()
	if c.i >= len(c.in) {
		return false
	}
	switch ch := c.in[c.i]; {
	case ch == '{':
		return c.object()
	case ch == '[':
		return c.array()
	case ch == '"':
		_, ok := c.str()
		return ok
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	}
	return c.number()
}

func (c *canonical) literal(s string) bool {
	if !bytes.HasPrefix(c.in[c.i:], []byte(s)) {
		return false
	}
	c.i += len(s)
	c.out = append(c.out, s...)
	return true
}

// number copies a number as written (json.Number keeps its literal),
// after checking it against JSON's grammar.
func (c *canonical) number() bool {
	start := c.i
	for c.i < len(c.in) && strings.IndexByte("0123456789-+.eE", c.in[c.i]) >= 0 {
		c.i++
	}
	n := c.in[start:c.i]
	if !validNumber(n) {
		return false
	}
	c.out = append(c.out, n...)
	return true
}

// validNumber is JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(s []byte) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	digits := func() int {
		n := 0
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		s = s[n:]
		return n
	}
	if len(s) == 0 {
		return false
	}
	if s[0] == '0' {
		s = s[1:]
	} else if digits() == 0 {
		return false
	}
	if len(s) > 0 && s[0] == '.' {
		s = s[1:]
		if digits() == 0 {
			return false
		}
	}
	if len(s) > 0 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
			s = s[1:]
		}
		if digits() == 0 {
			return false
		}
	}
	return len(s) == 0
}

// str writes the string at c.i as json.Marshal writes its decoded value,
// and returns that value. Most strings need no escaping and are copied;
// the others are decoded and re-encoded by encoding/json itself.
func (c *canonical) str() (string, bool) {
	start := c.i
	plain := true
	for c.i++; c.i < len(c.in); c.i++ {
		switch ch := c.in[c.i]; {
		case ch == '\\':
			plain = false
			c.i++
		case ch == '"':
			c.i++
			raw := c.in[start:c.i]
			inner := raw[1 : len(raw)-1]
			if plain && utf8.Valid(inner) && !bytes.ContainsAny(inner, "<>&\u2028\u2029") {
				c.out = append(c.out, raw...)
				return string(inner), true
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return "", false
			}
			enc, err := json.Marshal(s)
			if err != nil {
				return "", false
			}
			c.out = append(c.out, enc...)
			return s, true
		case ch < 0x20:
			return "", false // a control character must be escaped
		}
	}
	return "", false
}

func (c *canonical) array() bool {
	c.i++ // [
	c.out = append(c.out, '[')
	if c.space(); c.i < len(c.in) && c.in[c.i] == ']' {
		c.i++
		c.out = append(c.out, ']')
		return true
	}
	for {
		if !c.value() {
			return false
		}
		c.space()
		if c.i >= len(c.in) {
			return false
		}
		switch c.in[c.i] {
		case ',':
			c.i++
			c.out = append(c.out, ',')
		case ']':
			c.i++
			c.out = append(c.out, ']')
			return true
		default:
			return false
		}
	}
}

// member is one written member of an object: its decoded key and where
// its canonical bytes ("key":value) are in c.out.
type member struct {
	key        string
	start, end int32 // a body is far below 2 GiB (the body limit)
}

func (c *canonical) object() bool {
	c.i++ // {
	c.out = append(c.out, '{')
	if c.space(); c.i < len(c.in) && c.in[c.i] == '}' {
		c.i++
		c.out = append(c.out, '}')
		return true
	}
	base := len(c.out)
	mark := len(c.members)
	defer func() { c.members = c.members[:mark] }()
	sorted := true
	for {
		if c.space(); c.i >= len(c.in) || c.in[c.i] != '"' {
			return false
		}
		start := len(c.out)
		key, ok := c.str()
		if !ok {
			return false
		}
		if c.space(); c.i >= len(c.in) || c.in[c.i] != ':' {
			return false
		}
		c.i++
		c.out = append(c.out, ':')
		if !c.value() {
			return false
		}
		if n := len(c.members); n > mark && c.members[n-1].key >= key {
			sorted = false
		}
		c.members = append(c.members, member{key, int32(start), int32(len(c.out))})
		c.space()
		if c.i >= len(c.in) {
			return false
		}
		if c.in[c.i] == '}' {
			c.i++
			break
		}
		if c.in[c.i] != ',' {
			return false
		}
		c.i++
		c.out = append(c.out, ',')
	}
	if members := c.members[mark:]; !sorted {
		// Reorder: by key (stable, so the last of equal keys is the
		// last in its run and is the one kept, as a map decode keeps it).
		slices.SortStableFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
		c.tmp = append(c.tmp[:0], c.out[base:]...)
		c.out = c.out[:base]
		for i, m := range members {
			if i+1 < len(members) && members[i+1].key == m.key {
				continue
			}
			if len(c.out) > base {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, c.tmp[int(m.start)-base:int(m.end)-base]...)
		}
	}
	c.out = append(c.out, '}')
	return true
}
