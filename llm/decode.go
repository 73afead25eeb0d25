package llm

import (
	"encoding/json"

	"github.com/countersign/countersign/internal/jsonform"
)

// DecodeMessage decodes a message as it is stored: the JSON that
// encoding/json writes for it. A process that takes up a conversation it
// has not seen decodes every message of it, and encoding/json's
// reflection was most of what that cost (about 2.7 µs a message). The
// form encoding/json writes — the keys as tagged, each once, strings
// with the escapes it writes — is read directly (see package jsonform);
// anything else (other spellings of a key, a key twice, null, or JSON
// that is not valid) goes to json.Unmarshal, and so does a string with
// a surrogate escape or bytes that are not UTF-8. The result is always
// json.Unmarshal's (FuzzDecodeMessage).
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	err := m.DecodeJSON(b)
	return m, err
}

// DecodeJSON sets m to what DecodeMessage returns for b, in place: a
// conversation decodes its messages straight into its slice of them,
// rather than each into a Message of its own on the heap that is then
// copied there.
func (m *Message) DecodeJSON(b []byte) error {
	*m = Message{}
	d := decoder{jsonform.NewReader(b)}
	if d.message(m) {
		return nil
	}
	*m = Message{}
	return json.Unmarshal(b, m)
}

// decoder reads a message in the form encoding/json writes: the
// primitives are jsonform.Reader's, the fields Message's. A method that
// returns false has met something else, and the caller gives up.
type decoder struct {
	jsonform.Reader
}

// message reads a whole message: an object of Message's keys, each at
// most once, then nothing but white space.
func (d *decoder) message(m *Message) bool {
	ok := d.Members(func(k []byte) (uint32, bool) {
		var ok bool
		var s string
		switch string(k) {
		case "role":
			s, ok = d.Str()
			m.Role = Role(s)
			return 1 << 0, ok
		case "content":
			m.Content, ok = d.Str()
			return 1 << 1, ok
		case "tool_calls":
			m.ToolCalls, ok = d.toolCalls()
			return 1 << 2, ok
		case "tool_call_id":
			m.ToolCallID, ok = d.Str()
			return 1 << 3, ok
		case "name":
			m.Name, ok = d.Name()
			return 1 << 4, ok
		case "is_error":
			m.IsError, ok = d.Boolean()
			return 1 << 5, ok
		case "stop":
			s, ok = d.Str()
			m.Stop = Stop(s)
			return 1 << 6, ok
		case "thinking":
			m.Thinking, ok = d.thinking()
			return 1 << 7, ok
		}
		return 0, false
	})
	return ok && d.End()
}

// toolCalls reads an array of calls.
func (d *decoder) toolCalls() ([]ToolCall, bool) {
	calls := []ToolCall{}
	ok := d.Array(func() bool {
		var c ToolCall
		if !d.toolCall(&c) {
			return false
		}
		calls = append(calls, c)
		return true
	})
	if !ok {
		return nil, false
	}
	return calls, true
}

// toolCall reads an object of ToolCall's keys, each at most once.
func (d *decoder) toolCall(c *ToolCall) bool {
	return d.Members(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "id":
			c.ID, ok = d.Str()
			return 1 << 0, ok
		case "name":
			// A conversation names a few tools many times: one string each.
			c.Name, ok = d.Name()
			return 1 << 1, ok
		case "arguments":
			c.Arguments, ok = d.Str()
			return 1 << 2, ok
		case "truncated":
			c.Truncated, ok = d.Boolean()
			return 1 << 3, ok
		}
		return 0, false
	})
}

// thinking reads an array of thinking blocks.
func (d *decoder) thinking() ([]Thinking, bool) {
	blocks := []Thinking{}
	ok := d.Array(func() bool {
		var t Thinking
		ok := d.Members(func(k []byte) (uint32, bool) {
			var ok bool
			switch string(k) {
			case "type":
				t.Type, ok = d.Str()
				return 1 << 0, ok
			case "thinking":
				t.Text, ok = d.Str()
				return 1 << 1, ok
			case "signature":
				t.Signature, ok = d.Str()
				return 1 << 2, ok
			case "data":
				t.Data, ok = d.Str()
				return 1 << 3, ok
			}
			return 0, false
		})
		if ok {
			blocks = append(blocks, t)
		}
		return ok
	})
	if !ok {
		return nil, false
	}
	return blocks, true
}
