package agent

import (
	"encoding/json"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/jsonform"
	"github.com/countersign/countersign/tools"
)

// The state's JSON, read without reflection. A run reads its thread's
// state at every start and resume, and encoding/json read each call
// twice over (Call.UnmarshalJSON decodes a shadow type again) after a
// check of the whole text. DecodeJSON reads the form AppendJSON writes
// directly (see package jsonform): the fields a state usually has, each
// key once, as tagged. Anything else — notes, a cancellation, a call's
// input, a decision's answers, null, a key spelt otherwise, a number
// that is not an integer, JSON that is not valid — goes to
// json.Unmarshal, so the result is always json.Unmarshal's
// (FuzzDecodeState).

var _ graph.StateDecoder = (*State)(nil)

// DecodeJSON implements graph.StateDecoder: it sets s to what
// json.Unmarshal decodes from b into a zero State.
func (s *State) DecodeJSON(b []byte) error {
	d := stateReader{jsonform.NewReader(b)}
	var st State
	if d.state(&st) {
		*s = st
		return nil
	}
	*s = State{}
	return json.Unmarshal(b, s)
}

// DecodeJSON sets d to what json.Unmarshal decodes from b into a zero
// Decision: a claim's stored form, read as DecodeJSON of a State reads
// a call's decision, and by json.Unmarshal when that gives up
// (FuzzDecisionJSON).
func (d *Decision) DecodeJSON(b []byte) error {
	r := stateReader{jsonform.NewReader(b)}
	var dec Decision
	if r.decision(&dec) && r.End() {
		*d = dec
		return nil
	}
	*d = Decision{}
	return json.Unmarshal(b, d)
}

// stateReader reads a state in the form AppendJSON writes: the
// primitives are jsonform.Reader's, the fields State's and its parts'.
// A method that returns false has met something else, and the caller
// gives up.
type stateReader struct {
	jsonform.Reader
}

// state reads a whole state, then nothing but white space.
func (d *stateReader) state(s *State) bool {
	ok := d.Members(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "thread":
			s.Thread, ok = d.Name()
			return 1 << 0, ok
		case "requester":
			s.Requester, ok = d.Name()
			return 1 << 1, ok
		case "channel":
			s.Channel, ok = d.Name()
			return 1 << 2, ok
		case "team":
			s.Team, ok = d.Name()
			return 1 << 3, ok
		case "turn_by":
			s.TurnBy, ok = d.Name()
			return 1 << 4, ok
		case "calls":
			s.Calls = []Call{}
			ok = d.Array(func() bool {
				// Read in place: a call is large, and a copy of
				// it on the heap would be garbage at once. (A call
				// read in part is dropped with the whole state.)
				s.Calls = append(s.Calls, Call{})
				return d.call(&s.Calls[len(s.Calls)-1])
			})
			return 1 << 5, ok
		case "turns":
			s.Turns, ok = d.Int()
			return 1 << 6, ok
		case "pass_turns":
			s.PassTurns, ok = d.Int()
			return 1 << 7, ok
		}
		return 0, false
	})
	return ok && d.End()
}

// call reads a call as Call.UnmarshalJSON does.
func (d *stateReader) call(c *Call) bool {
	ok := d.Members(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "key":
			c.Key, ok = d.Name()
			return 1 << 0, ok
		case "id":
			c.ID, ok = d.Name()
			return 1 << 1, ok
		case "tool":
			c.Tool, ok = d.Name()
			return 1 << 2, ok
		case "args":
			c.Args, ok = d.Raw()
			return 1 << 3, ok
		case "edited_args":
			c.EditedArgs, ok = d.Raw()
			return 1 << 4, ok
		case "hash":
			c.Hash, ok = d.StrOrUnmarshal()
			return 1 << 5, ok
		case "requester":
			c.Requester, ok = d.Name()
			return 1 << 6, ok
		case "reason":
			c.Reason, ok = d.StrOrUnmarshal()
			return 1 << 7, ok
		case "status":
			return 1 << 8, d.Text(&c.Status)
		case "needs_approval":
			c.NeedsApproval, ok = d.Boolean()
			return 1 << 9, ok
		case "rule":
			c.Rule = new(CallRule)
			return 1 << 10, d.rule(c.Rule)
		case "since":
			return 1 << 11, d.Time(&c.Since)
		case "expires":
			return 1 << 12, d.Time(&c.Expires)
		case "decision":
			c.Decision = new(Decision)
			return 1 << 13, d.decision(c.Decision)
		case "result":
			c.Result, ok = d.StrOrUnmarshal()
			return 1 << 14, ok
		case "is_error":
			c.IsError, ok = d.Boolean()
			return 1 << 15, ok
		case "attempts":
			c.Attempts, ok = d.Int()
			return 1 << 16, ok
		case "unsent":
			c.Unsent, ok = d.Int()
			return 1 << 17, ok
		case "approvals_required":
			c.ApprovalsRequired, ok = d.Int()
			return 1 << 18, ok
		case "revision":
			c.Revision, ok = d.Int()
			return 1 << 19, ok
		case "edited_by":
			c.EditedBy, ok = d.Name()
			return 1 << 20, ok
		}
		return 0, false
	})
	if ok {
		c.unescapeArgs()
	}
	if ok && c.Hash == "" && len(c.Args) > 0 && c.NeedsApproval {
		c.Hash = tools.ArgsHash(c.Tool, c.Args)
	}
	return ok
}

func (d *stateReader) rule(r *CallRule) bool {
	return d.Members(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "approvers":
			r.Approvers, ok = d.Strings()
			return 1 << 0, ok
		case "self_approval":
			r.SelfApproval, ok = d.Boolean()
			return 1 << 1, ok
		}
		return 0, false
	})
}

func (d *stateReader) decision(dec *Decision) bool {
	return d.Members(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "kind":
			return 1 << 0, d.Text(&dec.Kind)
		case "by":
			dec.By, ok = d.Name()
			return 1 << 1, ok
		case "at":
			return 1 << 2, d.Time(&dec.At)
		case "args":
			dec.Args, ok = d.Raw()
			return 1 << 3, ok
		case "reason":
			dec.Reason, ok = d.StrOrUnmarshal()
			return 1 << 4, ok
		case "hash":
			dec.Hash, ok = d.StrOrUnmarshal()
			return 1 << 5, ok
		case "approvals":
			dec.Approvals = []Approval{}
			ok = d.Array(func() bool {
				var a Approval
				ok := d.Members(func(k []byte) (uint32, bool) {
					var ok bool
					switch string(k) {
					case "by":
						a.By, ok = d.Name()
						return 1 << 0, ok
					case "at":
						return 1 << 1, d.Time(&a.At)
					}
					return 0, false
				})
				dec.Approvals = append(dec.Approvals, a)
				return ok
			})
			return 1 << 6, ok
		}
		return 0, false
	})
}
