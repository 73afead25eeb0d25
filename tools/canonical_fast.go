package tools

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// canonicalFast is Canonical of the arguments a model mostly sends, read
// without encoding/json's decoder, which allocates for every token: valid
// JSON whose keys have no escapes, whose strings have none but the ones
// the canonical form writes the same (\" \\ \b \f \n \r \t), hold no
// U+2028, U+2029 or U+FFFD, and whose objects have at most
// maxFastMembers members. ok is false for anything else, and for
// anything Canonical refuses: Canonical then reads the arguments the slow
// way, which says why. Where ok is true, the result is the slow way's
// byte for byte (FuzzCanonicalFast).
func canonicalFast(args []byte) (out []byte, ok bool) {
	if !utf8.Valid(args) || !json.Valid(args) {
		return nil, false
	}
	c := fastCanon{in: args, out: make([]byte, 0, len(args))}
	if !c.value(0) {
		return nil, false
	}
	c.space()
	if c.pos != len(c.in) || len(c.out) > MaxArgsLen {
		return nil, false
	}
	return c.out, true
}

// maxFastMembers bounds the members of an object canonicalFast reads:
// it finds duplicate keys by comparing each with those before it.
const maxFastMembers = 32

// fastCanon reads valid JSON (json.Valid) from in at pos and writes its
// canonical form to out. tmp holds an object's members while they are
// put in order.
type fastCanon struct {
	in       []byte
	pos      int
	out, tmp []byte
}

// space skips white space.
func (c *fastCanon) space() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value reads one value at depth (see canonicalValue).
func (c *fastCanon) value(depth int) bool {
	c.space()
	switch c.in[c.pos] {
	case '{', '[':
		if depth >= maxArgsDepth {
			return false
		}
		if c.in[c.pos] == '[' {
			return c.array(depth + 1)
		}
		return c.object(depth + 1)
	case '"':
		s, ok := c.str(false)
		c.out = append(c.out, s...)
		return ok
	}
	// A number (as written) or true, false, null: up to what follows.
	start := c.pos
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			c.out = append(c.out, c.in[start:c.pos]...)
			return true
		}
		c.pos++
	}
	c.out = append(c.out, c.in[start:]...)
	return true
}

// str reads a string and returns it as it is written, quotes included,
// which is its canonical form; ok is false if it is not (see
// canonicalFast), or if it is a key (key) with an escape.
func (c *fastCanon) str(key bool) (s []byte, ok bool) {
	start := c.pos
	c.pos++ // the opening quote
	for {
		b := c.in[c.pos]
		switch {
		case b == '"':
			c.pos++
			return c.in[start:c.pos], true
		case b == '\\':
			if key {
				return nil, false
			}
			switch c.in[c.pos+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				c.pos += 2
			default: // \/ and \u are written otherwise
				return nil, false
			}
		case b < utf8.RuneSelf:
			c.pos++
		default:
			r, n := utf8.DecodeRune(c.in[c.pos:])
			if r == utf8.RuneError || r == '\u2028' || r == '\u2029' {
				return nil, false
			}
			c.pos += n
		}
	}
}

// array reads an array, at depth.
func (c *fastCanon) array(depth int) bool {
	c.pos++ // '['
	c.out = append(c.out, '[')
	c.space()
	if c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return true
	}
	for {
		if !c.value(depth) {
			return false
		}
		c.space()
		if c.in[c.pos] == ']' {
			c.pos++
			c.out = append(c.out, ']')
			return true
		}
		c.pos++ // ','
		c.out = append(c.out, ',')
	}
}

// object reads an object, at depth, and writes its members in the order
// of their keys (keys without escapes: as bytes, as strings.Compare
// orders them). Each value is written at the end of out as it is read,
// then all of them are moved to tmp and written back in order.
func (c *fastCanon) object(depth int) bool {
	var room [8]fastMember
	members := room[:0]
	base := len(c.out)
	c.pos++ // '{'
	for {
		c.space()
		switch c.in[c.pos] {
		case '}':
			c.pos++
			return c.writeObject(base, members)
		case ',':
			c.pos++
			c.space()
		}
		if len(members) == maxFastMembers {
			return false
		}
		quoted, ok := c.str(true)
		if !ok {
			return false
		}
		key := quoted[1 : len(quoted)-1]
		if slices.ContainsFunc(members, func(m fastMember) bool { return bytes.Equal(m.key, key) }) {
			return false // a duplicate: refused the slow way
		}
		c.space()
		c.pos++ // ':'
		start := len(c.out)
		if !c.value(depth) {
			return false
		}
		members = append(members, fastMember{key, start, len(c.out)})
	}
}

// fastMember is a member of an object fastCanon reads.
type fastMember struct {
	key        []byte // without its quotes
	start, end int    // its value in out
}

// writeObject replaces out[base:], the values of members one after
// another, with the object.
func (c *fastCanon) writeObject(base int, members []fastMember) bool {
	slices.SortFunc(members, func(a, b fastMember) int { return bytes.Compare(a.key, b.key) })
	c.tmp = append(c.tmp[:0], c.out[base:]...)
	c.out = append(c.out[:base], '{')
	for i, m := range members {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, '"')
		c.out = append(c.out, m.key...)
		c.out = append(c.out, '"', ':')
		c.out = append(c.out, c.tmp[m.start-base:m.end-base]...)
	}
	c.out = append(c.out, '}')
	return true
}
