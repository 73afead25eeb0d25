package llm

import (
	"encoding/json"
	"unicode/utf8"
)

// DecodeMessage decodes a message as it is stored: the JSON that
// encoding/json writes for it. A process that takes up a conversation it
// has not seen decodes every message of it, and encoding/json's
// reflection was most of what that cost (about 2.7 µs a message). The
// form encoding/json writes — the keys as tagged, each once, strings
// with the escapes it writes — is read directly; anything else (other
// spellings of a key, a key twice, null, a surrogate escape, bytes that
// are not UTF-8, or JSON that is not valid) goes to json.Unmarshal. The
// result is always json.Unmarshal's (FuzzDecodeMessage).
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	d := decoder{b: b}
	if d.message(&m) {
		return m, nil
	}
	m = Message{}
	err := json.Unmarshal(b, &m)
	return m, err
}

// decoder reads the form encoding/json writes; a method that returns
// false has met something else, and the caller gives up.
type decoder struct {
	b []byte
	i int
}

func (d *decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte reads c, after any white space.
func (d *decoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// key reads a member's key and its colon. A key with escapes is left to
// encoding/json.
func (d *decoder) key() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			k := d.b[start:d.i]
			d.i++
			return k, d.byte(':')
		case c == '\\' || c < 0x20:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// next reads what follows a member: true if another one does, false at
// the object's end; ok is false on anything else.
func (d *decoder) next() (more, ok bool) {
	if d.byte(',') {
		return true, true
	}
	return false, d.byte('}')
}

// members reads an object's members: field reads the value of the
// member named k and says which of the object's fields it was (a bit of
// its own, 0 for a name it does not know) and whether it read it. A
// name not known, or known twice, and any value field cannot read make
// members give up.
func (d *decoder) members(field func(k []byte) (bit uint8, ok bool)) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	var seen uint8
	for more := true; more; {
		k, ok := d.key()
		if !ok {
			return false
		}
		bit, ok := field(k)
		if bit == 0 || seen&bit != 0 || !ok {
			return false
		}
		seen |= bit
		if more, ok = d.next(); !ok {
			return false
		}
	}
	return true
}

// message reads a whole message: an object of Message's keys, each at
// most once, then nothing but white space.
func (d *decoder) message(m *Message) bool {
	ok := d.members(func(k []byte) (uint8, bool) {
		var ok bool
		var s string
		switch string(k) {
		case "role":
			s, ok = d.str()
			m.Role = Role(s)
			return 1 << 0, ok
		case "content":
			m.Content, ok = d.str()
			return 1 << 1, ok
		case "tool_calls":
			m.ToolCalls, ok = d.toolCalls()
			return 1 << 2, ok
		case "tool_call_id":
			m.ToolCallID, ok = d.str()
			return 1 << 3, ok
		case "name":
			m.Name, ok = d.str()
			return 1 << 4, ok
		case "is_error":
			m.IsError, ok = d.boolean()
			return 1 << 5, ok
		case "stop":
			s, ok = d.str()
			m.Stop = Stop(s)
			return 1 << 6, ok
		}
		return 0, false
	})
	d.space()
	return ok && d.i == len(d.b)
}

// toolCalls reads an array of calls.
func (d *decoder) toolCalls() ([]ToolCall, bool) {
	if !d.byte('[') {
		return nil, false
	}
	calls := []ToolCall{}
	if d.byte(']') {
		return calls, true
	}
	for {
		var c ToolCall
		if !d.toolCall(&c) {
			return nil, false
		}
		calls = append(calls, c)
		if d.byte(']') {
			return calls, true
		}
		if !d.byte(',') {
			return nil, false
		}
	}
}

// toolCall reads an object of ToolCall's keys, each at most once.
func (d *decoder) toolCall(c *ToolCall) bool {
	return d.members(func(k []byte) (uint8, bool) {
		var ok bool
		switch string(k) {
		case "id":
			c.ID, ok = d.str()
			return 1 << 0, ok
		case "name":
			c.Name, ok = d.str()
			return 1 << 1, ok
		case "arguments":
			c.Arguments, ok = d.str()
			return 1 << 2, ok
		case "truncated":
			c.Truncated, ok = d.boolean()
			return 1 << 3, ok
		}
		return 0, false
	})
}

func (d *decoder) boolean() (bool, bool) {
	d.space()
	for _, lit := range []string{"true", "false"} {
		if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
			d.i += len(lit)
			return lit == "true", true
		}
	}
	return false, false
}

// str reads a string. It gives up on what encoding/json would change
// (bytes that are not UTF-8) or reject, and on surrogate escapes.
func (d *decoder) str() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", false
		}
		d.i++
	}
	return "", false
}

// escaped reads the rest of a string that has escapes, from start.
func (d *decoder) escaped(start int) (string, bool) {
	out := make([]byte, 0, d.i-start+16)
	out = append(out, d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return "", false
		}
		switch e := d.b[d.i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(d.b[d.i+2:])
			if !ok || utf8.RuneLen(r) < 0 { // a surrogate: encoding/json pairs them
				return "", false
			}
			out = utf8.AppendRune(out, r)
			d.i += 4
		default:
			return "", false
		}
		d.i += 2
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
