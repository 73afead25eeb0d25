package agent

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

// The state's JSON, written without reflection. Every save of a thread
// encodes its state, and encoding/json did it in three passes: its
// reflection over State, a second json.Marshal inside each Call's
// MarshalJSON, and a check and compaction of what that method returned.
// AppendJSON writes the same bytes in one pass. It writes the fields a
// state usually has itself and hands the rarer ones (notes, a
// cancellation, a call's input, a decision's answers) to json.Marshal.
// The stored form is json.Marshal's, byte for byte (FuzzStateJSON,
// TestStateJSONIsJSON), so states written either way read the same. The
// journal's messages are written the same way (FuzzMessageJSON).

// AppendJSON implements graph.StateEncoder: it appends what json.Marshal
// writes for s.
func (s *State) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	b = appendStringField(b, "thread", s.Thread)
	b = appendStringField(b, "requester", s.Requester)
	b = appendStringField(b, "channel", s.Channel)
	b = appendStringField(b, "team", s.Team)
	b = appendStringField(b, "turn_by", s.TurnBy)
	var err error
	if len(s.Notes) > 0 {
		if b, err = appendMarshalled(b, "notes", s.Notes); err != nil {
			return nil, err
		}
	}
	if len(s.Calls) > 0 {
		b = appendKey(b, "calls")
		b = append(b, '[')
		for i := range s.Calls {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = s.Calls[i].appendJSON(b); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if s.Cancelled != nil {
		if b, err = appendMarshalled(b, "cancelled", s.Cancelled); err != nil {
			return nil, err
		}
	}
	b = appendKey(b, "turns")
	b = strconv.AppendInt(b, int64(s.Turns), 10)
	b = appendKey(b, "pass_turns")
	b = strconv.AppendInt(b, int64(s.PassTurns), 10)
	return append(b, '}'), nil
}

// MarshalJSON implements json.Marshaler: Hash is left out when it is the
// hash of the tool and Args, which UnmarshalJSON computes again — a
// paused thread then stores each hash once at most.
func (c Call) MarshalJSON() ([]byte, error) {
	return c.appendJSON(make([]byte, 0, 256))
}

// appendJSON appends the call's JSON: what json.Marshal writes for the
// call as a plain struct, without Hash when MarshalJSON leaves it out.
func (c *Call) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"key":`...)
	b = appendString(b, c.Key)
	b = append(b, `,"id":`...)
	b = appendString(b, c.ID)
	b = append(b, `,"tool":`...)
	b = appendString(b, c.Tool)
	var err error
	if b, err = appendRawField(b, "args", c.Args); err != nil {
		return nil, err
	}
	if b, err = appendRawField(b, "edited_args", c.EditedArgs); err != nil {
		return nil, err
	}
	if c.Hash != "" && (len(c.Args) == 0 || c.Hash != tools.ArgsHash(c.Tool, c.Args)) {
		b = appendStringField(b, "hash", c.Hash)
	}
	b = appendStringField(b, "requester", c.Requester)
	b = appendStringField(b, "reason", c.Reason)
	status, err := c.Status.MarshalText()
	if err != nil {
		return nil, err
	}
	b = appendKey(b, "status")
	b = appendString(b, string(status))
	if c.NeedsApproval {
		b = appendKey(b, "needs_approval")
		b = append(b, "true"...)
	}
	if r := c.Rule; r != nil {
		b = appendKey(b, "rule")
		b = append(b, '{')
		if len(r.Approvers) > 0 {
			b = appendKey(b, "approvers")
			b = appendStrings(b, r.Approvers)
		}
		if r.SelfApproval {
			b = appendKey(b, "self_approval")
			b = append(b, "true"...)
		}
		b = append(b, '}')
	}
	if b, err = appendTimeField(b, "since", c.Since); err != nil {
		return nil, err
	}
	if b, err = appendTimeField(b, "expires", c.Expires); err != nil {
		return nil, err
	}
	if d := c.Decision; d != nil {
		b = appendKey(b, "decision")
		if b, err = d.appendJSON(b); err != nil {
			return nil, err
		}
	}
	b = appendStringField(b, "result", c.Result)
	if c.IsError {
		b = appendKey(b, "is_error")
		b = append(b, "true"...)
	}
	b = appendIntField(b, "attempts", c.Attempts)
	b = appendIntField(b, "unsent", c.Unsent)
	b = appendIntField(b, "approvals_required", c.ApprovalsRequired)
	b = appendIntField(b, "revision", c.Revision)
	b = appendStringField(b, "edited_by", c.EditedBy)
	if c.Input != nil {
		if b, err = appendMarshalled(b, "input", c.Input); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendJSON appends what json.Marshal writes for d.
func (d *Decision) appendJSON(b []byte) ([]byte, error) {
	kind, err := d.Kind.MarshalText()
	if err != nil {
		return nil, err
	}
	b = append(b, `{"kind":`...)
	b = appendString(b, string(kind))
	b = append(b, `,"by":`...)
	b = appendString(b, d.By)
	b = append(b, `,"at":`...)
	if b, err = appendTime(b, d.At); err != nil {
		return nil, err
	}
	if b, err = appendRawField(b, "args", d.Args); err != nil {
		return nil, err
	}
	b = appendStringField(b, "reason", d.Reason)
	b = appendStringField(b, "hash", d.Hash)
	if len(d.Approvals) > 0 {
		b = append(b, `,"approvals":[`...)
		for i, a := range d.Approvals {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"by":`...)
			b = appendString(b, a.By)
			b = append(b, `,"at":`...)
			if b, err = appendTime(b, a.At); err != nil {
				return nil, err
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(d.Answers) > 0 {
		if b, err = appendMarshalled(b, "answers", d.Answers); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendMessage appends what json.Marshal writes for m: a journal
// entry.
func appendMessage(b []byte, m *llm.Message) []byte {
	b = append(b, `{"role":`...)
	b = appendString(b, string(m.Role))
	b = appendStringField(b, "content", m.Content)
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, tc.ID)
			b = append(b, `,"name":`...)
			b = appendString(b, tc.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, tc.Arguments)
			if tc.Truncated {
				b = append(b, `,"truncated":true`...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendStringField(b, "tool_call_id", m.ToolCallID)
	b = appendStringField(b, "name", m.Name)
	if m.IsError {
		b = append(b, `,"is_error":true`...)
	}
	b = appendStringField(b, "stop", string(m.Stop))
	return append(b, '}')
}

// appendKey appends a member's key and colon, after a comma unless it
// is the object's first member (b ends with its '{').
func appendKey(b []byte, key string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendStringField appends a string member tagged omitempty.
func appendStringField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(appendKey(b, key), s)
}

// appendIntField appends an int member tagged omitempty.
func appendIntField(b []byte, key string, n int) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(appendKey(b, key), int64(n), 10)
}

// appendTimeField appends a time member tagged omitzero.
func appendTimeField(b []byte, key string, t time.Time) ([]byte, error) {
	if t.IsZero() {
		return b, nil
	}
	return appendTime(appendKey(b, key), t)
}

// appendTime appends t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds), failing where it fails.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}

// appendRawField appends a json.RawMessage member tagged omitempty as
// json.Marshal does: compacted, with <, >, & and U+2028, U+2029 escaped.
// Arguments are kept in canonical form, which is so already: they are
// appended as they are once checked to be valid.
func appendRawField(b []byte, key string, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return b, nil
	}
	if !isCompact(raw) || !json.Valid(raw) {
		var err error
		if raw, err = json.Marshal(raw); err != nil {
			return nil, err
		}
	}
	return append(appendKey(b, key), raw...), nil
}

// appendMarshalled appends a member whose value json.Marshal writes.
func appendMarshalled(b []byte, key string, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(appendKey(b, key), j...), nil
}

// isCompact reports whether raw has nothing json.Marshal would change
// in it: no white space outside strings, and none of the bytes it
// escapes (0xE2 begins U+2028 and U+2029, and other characters).
func isCompact(raw []byte) bool {
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case c == '<' || c == '>' || c == '&' || c == 0xE2:
			return false
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}

func appendStrings(b []byte, list []string) []byte {
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendString appends s quoted as json.Marshal quotes it: with <, >
// and & escaped, U+2028 and U+2029 escaped, and each byte that is not
// UTF-8 replaced by U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // other control characters, <, > and &
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

var _ graph.StateEncoder = (*State)(nil)
