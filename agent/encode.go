package agent

import (
	"encoding/base64"
	"strconv"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/jsonform"
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
// journal's messages are written the same way (FuzzJournalJSON).

// AppendJSON implements graph.StateEncoder: it appends what json.Marshal
// writes for s.
func (s *State) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	b = jsonform.AppendStringField(b, "thread", s.Thread)
	b = jsonform.AppendStringField(b, "requester", s.Requester)
	b = jsonform.AppendStringField(b, "channel", s.Channel)
	b = jsonform.AppendStringField(b, "team", s.Team)
	b = jsonform.AppendStringField(b, "turn_by", s.TurnBy)
	var err error
	if len(s.Notes) > 0 {
		if b, err = jsonform.AppendMarshalled(b, "notes", s.Notes); err != nil {
			return nil, err
		}
	}
	if len(s.Calls) > 0 {
		b = jsonform.AppendKey(b, "calls")
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
		if b, err = jsonform.AppendMarshalled(b, "cancelled", s.Cancelled); err != nil {
			return nil, err
		}
	}
	b = jsonform.AppendKey(b, "turns")
	b = strconv.AppendInt(b, int64(s.Turns), 10)
	b = jsonform.AppendKey(b, "pass_turns")
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
	b = jsonform.AppendString(b, c.Key)
	b = append(b, `,"id":`...)
	b = jsonform.AppendString(b, c.ID)
	b = append(b, `,"tool":`...)
	b = jsonform.AppendString(b, c.Tool)
	var err error
	if b, err = jsonform.AppendRawField(b, "args", c.Args); err != nil {
		return nil, err
	}
	if b, err = jsonform.AppendRawField(b, "edited_args", c.EditedArgs); err != nil {
		return nil, err
	}
	if c.Hash != "" && (len(c.Args) == 0 || c.Hash != tools.ArgsHash(c.Tool, c.Args)) {
		b = jsonform.AppendStringField(b, "hash", c.Hash)
	}
	b = jsonform.AppendStringField(b, "requester", c.Requester)
	b = jsonform.AppendStringField(b, "reason", c.Reason)
	status, ok := statusNames[c.Status] // MarshalText's name, not copied
	if !ok {
		_, err := c.Status.MarshalText()
		return nil, err
	}
	b = jsonform.AppendKey(b, "status")
	b = jsonform.AppendString(b, status)
	if c.NeedsApproval {
		b = jsonform.AppendKey(b, "needs_approval")
		b = append(b, "true"...)
	}
	if r := c.Rule; r != nil {
		b = jsonform.AppendKey(b, "rule")
		b = append(b, '{')
		if len(r.Approvers) > 0 {
			b = jsonform.AppendKey(b, "approvers")
			b = jsonform.AppendStrings(b, r.Approvers)
		}
		if r.SelfApproval {
			b = jsonform.AppendKey(b, "self_approval")
			b = append(b, "true"...)
		}
		b = append(b, '}')
	}
	if b, err = jsonform.AppendTimeField(b, "since", c.Since); err != nil {
		return nil, err
	}
	if b, err = jsonform.AppendTimeField(b, "expires", c.Expires); err != nil {
		return nil, err
	}
	if d := c.Decision; d != nil {
		b = jsonform.AppendKey(b, "decision")
		if b, err = d.AppendJSON(b); err != nil {
			return nil, err
		}
	}
	b = jsonform.AppendStringField(b, "result", c.Result)
	if c.IsError {
		b = jsonform.AppendKey(b, "is_error")
		b = append(b, "true"...)
	}
	b = appendImages(b, c.Images)
	b = jsonform.AppendIntField(b, "attempts", c.Attempts)
	b = jsonform.AppendIntField(b, "unsent", c.Unsent)
	b = jsonform.AppendIntField(b, "approvals_required", c.ApprovalsRequired)
	b = jsonform.AppendIntField(b, "revision", c.Revision)
	b = jsonform.AppendStringField(b, "edited_by", c.EditedBy)
	if c.Input != nil {
		if b, err = jsonform.AppendMarshalled(b, "input", c.Input); err != nil {
			return nil, err
		}
	}
	b = jsonform.AppendStringField(b, "tool_version", c.ToolVersion)
	return append(b, '}'), nil
}

// AppendJSON appends what json.Marshal writes for d: a claim's stored
// form, written without reflection.
func (d *Decision) AppendJSON(b []byte) ([]byte, error) {
	kind, ok := kindNames[d.Kind] // MarshalText's name, not copied
	if !ok {
		_, err := d.Kind.MarshalText()
		return nil, err
	}
	var err error
	b = append(b, `{"kind":`...)
	b = jsonform.AppendString(b, kind)
	b = append(b, `,"by":`...)
	b = jsonform.AppendString(b, d.By)
	b = append(b, `,"at":`...)
	if b, err = jsonform.AppendTime(b, d.At); err != nil {
		return nil, err
	}
	if b, err = jsonform.AppendRawField(b, "args", d.Args); err != nil {
		return nil, err
	}
	b = jsonform.AppendStringField(b, "reason", d.Reason)
	b = jsonform.AppendStringField(b, "hash", d.Hash)
	if len(d.Approvals) > 0 {
		b = append(b, `,"approvals":[`...)
		for i, a := range d.Approvals {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"by":`...)
			b = jsonform.AppendString(b, a.By)
			b = append(b, `,"at":`...)
			if b, err = jsonform.AppendTime(b, a.At); err != nil {
				return nil, err
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(d.Answers) > 0 {
		if b, err = jsonform.AppendMarshalled(b, "answers", d.Answers); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// messageSize is about the length of appendMessage's JSON for m, for
// its buffer to be made once rather than grown field by field: the
// field names, then the texts, with room for a quarter more of escapes
// (a tool's result and a call's arguments are often JSON, quotes and
// all).
func messageSize(m *llm.Message) int {
	n := len(m.Content) + len(m.ToolCallID) + len(m.Name) + len(m.Stop)
	for _, tc := range m.ToolCalls {
		n += 48 + len(tc.ID) + len(tc.Name) + len(tc.Arguments)
	}
	images := 0 // base64 has no escapes
	for _, img := range m.Images {
		images += 32 + len(img.MIME) + base64.StdEncoding.EncodedLen(len(img.Data))
	}
	return 96 + n + n/4 + images
}

// appendImages appends what json.Marshal writes for a field of images
// with omitempty.
func appendImages(b []byte, images []llm.Image) []byte {
	if len(images) == 0 {
		return b
	}
	b = append(b, `,"images":[`...)
	for i, img := range images {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"mime":`...)
		b = jsonform.AppendString(b, img.MIME)
		b = append(b, `,"data":`...)
		if img.Data == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, img.Data)
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendMessage appends what json.Marshal writes for m: a journal
// entry.
func appendMessage(b []byte, m *llm.Message) []byte {
	b = append(b, `{"role":`...)
	b = jsonform.AppendString(b, string(m.Role))
	b = jsonform.AppendStringField(b, "content", m.Content)
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = jsonform.AppendString(b, tc.ID)
			b = append(b, `,"name":`...)
			b = jsonform.AppendString(b, tc.Name)
			b = append(b, `,"arguments":`...)
			b = jsonform.AppendString(b, tc.Arguments)
			if tc.Truncated {
				b = append(b, `,"truncated":true`...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = jsonform.AppendStringField(b, "tool_call_id", m.ToolCallID)
	b = jsonform.AppendStringField(b, "name", m.Name)
	if m.IsError {
		b = append(b, `,"is_error":true`...)
	}
	b = appendImages(b, m.Images)
	b = jsonform.AppendStringField(b, "stop", string(m.Stop))
	if len(m.Thinking) > 0 {
		b = append(b, `,"thinking":[`...)
		for i, t := range m.Thinking {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = jsonform.AppendString(b, t.Type)
			b = jsonform.AppendStringField(b, "thinking", t.Text)
			b = jsonform.AppendStringField(b, "signature", t.Signature)
			b = jsonform.AppendStringField(b, "data", t.Data)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

var _ graph.StateEncoder = (*State)(nil)
