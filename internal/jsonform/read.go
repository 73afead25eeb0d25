// Package jsonform writes and reads the form encoding/json writes,
// without reflection.
//
// The form is what json.Marshal writes for a struct: no white space,
// keys spelt as tagged and each once, strings quoted with the escapes
// json.Marshal uses (<, >, &, U+2028 and U+2029 included), integers in
// decimal and times as time.Time's MarshalJSON writes them. The stored
// states, checkpoints and messages of the project are in this form, and
// reading and writing them through reflection was most of what saving
// and loading a thread cost.
//
// The rule: what is written here is byte for byte what json.Marshal
// writes, and what is read here is what json.Unmarshal reads. Anything
// a reader does not recognise — a key spelt otherwise or given twice,
// null, a number that is not an integer, JSON that is not valid — goes
// to encoding/json. The Append functions write the pieces of a value; a
// Reader's methods read them and return false on anything else, so that
// the caller gives up and hands the whole text to json.Unmarshal
// (StrOrUnmarshal hands it only the string it could not read). Each
// package keeps only which fields its own types have (llm's Message,
// agent's State, graph's Checkpoint).
package jsonform

import (
	"encoding/json"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// A Reader reads JSON in the form encoding/json writes, from the start
// of a text. A method that returns false has met something else, and
// the caller gives up.
type Reader struct {
	b []byte
	i int
	// name says that Str is reading for Name.
	name bool
}

// NewReader returns a Reader at the start of b.
func NewReader(b []byte) Reader {
	return Reader{b: b}
}

// Offset returns how many bytes of the text have been read.
func (r *Reader) Offset() int {
	return r.i
}

// End reads any white space and reports whether the text ends there.
func (r *Reader) End() bool {
	r.Space()
	return r.i == len(r.b)
}

// Space reads any white space. The form has none, and what follows is
// most often a byte above the space: it returns at once then.
func (r *Reader) Space() {
	for r.i < len(r.b) && r.b[r.i] <= ' ' {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// Byte reads c, after any white space.
func (r *Reader) Byte(c byte) bool {
	r.Space()
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

// Key reads a member's key and its colon, and returns the key's text,
// not a copy of it. A key with escapes is left to encoding/json; one
// that is not UTF-8 is returned, and matches none of the caller's names.
func (r *Reader) Key() ([]byte, bool) {
	k, ok := r.plain()
	return k, ok && r.Byte(':')
}

// Members reads an object's members: field reads the value of the
// member named k and says which of the object's fields it was (a bit of
// its own, 0 for a name it does not know) and whether it read it. A
// name not known, or known twice, and any value field cannot read make
// Members give up.
func (r *Reader) Members(field func(k []byte) (bit uint32, ok bool)) bool {
	if !r.Byte('{') {
		return false
	}
	if r.Byte('}') {
		return true
	}
	var seen uint32
	for {
		k, ok := r.Key()
		if !ok {
			return false
		}
		bit, ok := field(k)
		if bit == 0 || seen&bit != 0 || !ok {
			return false
		}
		seen |= bit
		if !r.Byte(',') {
			return r.Byte('}')
		}
	}
}

// Array reads an array, each element with elem.
func (r *Reader) Array(elem func() bool) bool {
	if !r.Byte('[') {
		return false
	}
	if r.Byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if r.Byte(']') {
			return true
		}
		if !r.Byte(',') {
			return false
		}
	}
}

// Strings reads an array of strings, each as StrOrUnmarshal does.
func (r *Reader) Strings() ([]string, bool) {
	out := []string{}
	return out, r.Array(func() bool {
		s, ok := r.StrOrUnmarshal()
		out = append(out, s)
		return ok
	})
}

// Token reads a string that has no escapes, all of it UTF-8 (a name, an
// ID, a time), and returns its text, not a copy of it.
func (r *Reader) Token() ([]byte, bool) {
	s, ok := r.plain()
	return s, ok && utf8.Valid(s)
}

// plain reads a string that has no escapes and no control characters,
// and returns its text, not a copy of it.
func (r *Reader) plain() ([]byte, bool) {
	if !r.Byte('"') {
		return nil, false
	}
	start := r.i
	for r.i < len(r.b) {
		c := r.b[r.i]
		if inString[c] {
			r.i++
			continue
		}
		switch {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		r.i++
	}
	return nil, false
}

// inString marks the ASCII bytes a string's JSON holds as they are:
// all but control characters, the quote and the backslash.
var inString = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Str reads a string as json.Marshal writes it, decoding its escapes.
// It gives up on what encoding/json would decode otherwise: bytes that
// are not UTF-8 (it replaces them) and surrogate escapes (it pairs
// them).
func (r *Reader) Str() (string, bool) {
	if !r.Byte('"') {
		return "", false
	}
	start := r.i
	ascii := true
	for r.i < len(r.b) {
		c := r.b[r.i]
		if inString[c] {
			r.i++
			continue
		}
		switch {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			if r.name {
				return recentName(s), true
			}
			return string(s), true
		case c == '\\':
			return r.escaped(start)
		case c < 0x20:
			return "", false
		}
		ascii = false // c is above ASCII
		r.i++
	}
	return "", false
}

// StrOrUnmarshal reads a string as Str does, and one Str gives up on
// with json.Unmarshal; it gives up only on what json.Unmarshal rejects.
func (r *Reader) StrOrUnmarshal() (string, bool) {
	r.Space()
	start := r.i
	if s, ok := r.Str(); ok {
		return s, true
	}
	if start == len(r.b) || r.b[start] != '"' {
		return "", false
	}
	return r.unmarshalStr(start)
}

// escaped reads the rest of a string that has escapes, its text from
// start, as Str does. The string is built once, in a strings.Builder
// (whose String does not copy), and the text between escapes is copied
// a run at a time: a message of several paragraphs is a string with
// escapes, and most of what a conversation holds.
func (r *Reader) escaped(start int) (string, bool) {
	var out strings.Builder
	out.Grow(escapedLen(r.b[r.i:]) + r.i - start)
	out.Write(r.b[start:r.i])
	for r.i < len(r.b) {
		run := r.i
		for r.i < len(r.b) && inString[r.b[r.i]] {
			r.i++
		}
		out.Write(r.b[run:r.i])
		if r.i == len(r.b) {
			return "", false
		}
		c := r.b[r.i]
		switch {
		case c == '"':
			r.i++
			s := out.String()
			if !utf8.ValidString(s) {
				return "", false
			}
			return s, true
		case c < 0x20:
			return "", false
		case c != '\\':
			out.WriteByte(c) // above ASCII
			r.i++
			continue
		}
		if r.i+1 >= len(r.b) {
			return "", false
		}
		switch e := r.b[r.i+1]; e {
		case '"', '\\', '/':
			out.WriteByte(e)
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		case 'u':
			c, ok := hex4(r.b[r.i+2:])
			if !ok || utf8.RuneLen(c) < 0 { // a surrogate: encoding/json pairs them
				return "", false
			}
			out.WriteRune(c)
			r.i += 4
		default:
			return "", false
		}
		r.i += 2
	}
	return "", false
}

// escapedLen is the length of the JSON text of the rest of a string,
// up to its closing quote (or the end of b): what it decodes to is no
// longer, since every escape is longer than what it stands for.
func escapedLen(b []byte) int {
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(b)
}

// unmarshalStr reads the string that begins at start (its quote) with
// encoding/json.
func (r *Reader) unmarshalStr(start int) (string, bool) {
	r.i = start + 1
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case '\\':
			r.i += 2
			continue
		case '"':
			r.i++
			var s string
			if json.Unmarshal(r.b[start:r.i], &s) != nil {
				return "", false
			}
			return s, true
		}
		r.i++
	}
	return "", false
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Text reads a string value as encoding/json hands it to an
// encoding.TextUnmarshaler (a status, a kind), when it has no escapes.
func (r *Reader) Text(u interface{ UnmarshalText([]byte) error }) bool {
	s, ok := r.Token()
	return ok && u.UnmarshalText(s) == nil
}

// Time reads a time as time.Time's UnmarshalJSON does.
func (r *Reader) Time(t *time.Time) bool {
	s, ok := r.Token()
	return ok && t.UnmarshalText(s) == nil
}

// Int reads an integer as Int64 does, when an int holds it.
func (r *Reader) Int() (int, bool) {
	n, ok := r.Int64()
	if !ok || int64(int(n)) != n {
		return 0, false
	}
	return int(n), true
}

// Int64 reads an integer: digits, after a minus sign or not, and no
// leading zero; up to 19 of them (a time in Unix nanoseconds), when an
// int64 holds it.
func (r *Reader) Int64() (int64, bool) {
	r.Space()
	start := r.i
	neg := r.i < len(r.b) && r.b[r.i] == '-'
	if neg {
		r.i++
	}
	digits := r.i
	for r.i < len(r.b) && '0' <= r.b[r.i] && r.b[r.i] <= '9' {
		r.i++
	}
	if r.i == digits || (r.b[digits] == '0' && r.i > digits+1) {
		return 0, false
	}
	if r.i-digits > 19 || r.i < len(r.b) && (r.b[r.i] == '.' || r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		return 0, false
	}
	var n uint64 // 19 digits fit
	for _, c := range r.b[digits:r.i] {
		n = n*10 + uint64(c-'0')
	}
	switch {
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	case neg && n <= math.MaxInt64+1:
		return int64(-n), true
	}
	r.i = start
	return 0, false
}

// Null reads null.
func (r *Reader) Null() bool {
	r.Space()
	if len(r.b)-r.i >= 4 && string(r.b[r.i:r.i+4]) == "null" {
		r.i += 4
		return true
	}
	return false
}

// Boolean reads true or false.
func (r *Reader) Boolean() (bool, bool) {
	r.Space()
	for _, lit := range []string{"true", "false"} {
		if len(r.b)-r.i >= len(lit) && string(r.b[r.i:r.i+len(lit)]) == lit {
			r.i += len(lit)
			return lit == "true", true
		}
	}
	return false, false
}

// Raw reads an object as a json.RawMessage: its text as it is, once
// checked to be valid JSON.
func (r *Reader) Raw() (json.RawMessage, bool) {
	r.Space()
	start := r.i
	if !r.skip() {
		return nil, false
	}
	v := r.b[start:r.i]
	if v[0] != '{' || !json.Valid(v) {
		return nil, false
	}
	return append(json.RawMessage(nil), v...), true
}

// skip passes over one value: a string, or an object or array, to its
// matching end. Whether it is valid JSON is checked by the caller.
func (r *Reader) skip() bool {
	depth := 0
	inString := false
	for r.i < len(r.b) {
		c := r.b[r.i]
		r.i++
		switch {
		case inString && c == '\\':
			r.i++
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		}
		if depth == 0 && !inString {
			return true
		}
	}
	return false
}
