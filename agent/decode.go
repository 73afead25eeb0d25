package agent

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/tools"
)

// The state's JSON, read without reflection. A run reads its thread's
// state at every start and resume, and encoding/json read each call
// twice over (Call.UnmarshalJSON decodes a shadow type again) after a
// check of the whole text. DecodeJSON reads the form AppendJSON writes
// directly: the fields a state usually has, each key once, as tagged.
// Anything else — notes, a cancellation, a call's input, a decision's
// answers, null, a key spelt otherwise, a number that is not an
// integer, JSON that is not valid — goes to json.Unmarshal, so the
// result is always json.Unmarshal's (FuzzDecodeState).

var _ graph.StateDecoder = (*State)(nil)

// DecodeJSON implements graph.StateDecoder: it sets s to what
// json.Unmarshal decodes from b into a zero State.
func (s *State) DecodeJSON(b []byte) error {
	d := stateReader{b: b}
	var st State
	if d.state(&st) {
		*s = st
		return nil
	}
	*s = State{}
	return json.Unmarshal(b, s)
}

// stateReader reads the form AppendJSON writes; a method that returns
// false has met something else, and the caller gives up.
type stateReader struct {
	b []byte
	i int
}

func (d *stateReader) space() {
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
func (d *stateReader) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// members reads an object's members: field reads the value of the
// member named k and says which of the object's fields it was (a bit of
// its own, 0 for a name it does not know) and whether it read it. A
// name not known, or known twice, and any value field cannot read make
// members give up.
func (d *stateReader) members(field func(k []byte) (bit uint32, ok bool)) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	var seen uint32
	for {
		k, ok := d.token()
		if !ok || !d.byte(':') {
			return false
		}
		bit, ok := field(k)
		if bit == 0 || seen&bit != 0 || !ok {
			return false
		}
		seen |= bit
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// token reads a string that has no escapes, all of it UTF-8 (a key, a
// name, an ID, a time), and returns its text, not a copy of it.
func (d *stateReader) token() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// str reads a string. One with escapes or bytes that are not UTF-8 is
// decoded by encoding/json.
func (d *stateReader) str() (string, bool) {
	d.space()
	start := d.i
	if s, ok := d.token(); ok {
		return string(s), true
	}
	// Find the string's end, and let encoding/json read it.
	d.i = start
	if !d.byte('"') {
		return "", false
	}
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case '\\':
			d.i += 2
			continue
		case '"':
			d.i++
			var s string
			if json.Unmarshal(d.b[start:d.i], &s) != nil {
				return "", false
			}
			return s, true
		}
		d.i++
	}
	return "", false
}

// text reads a string value as encoding/json hands it to an
// encoding.TextUnmarshaler: a status, a kind.
func (d *stateReader) text(u interface{ UnmarshalText([]byte) error }) bool {
	s, ok := d.token()
	return ok && u.UnmarshalText(s) == nil
}

// time reads a time as time.Time's UnmarshalJSON does.
func (d *stateReader) time(t *time.Time) bool {
	s, ok := d.token()
	return ok && t.UnmarshalText(s) == nil
}

// int reads an integer: digits, after a minus sign or not, and no
// leading zero; up to 18 of them, which an int holds.
func (d *stateReader) int() (int, bool) {
	d.space()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.b[digits] == '0' && d.i > digits+1) {
		return 0, false
	}
	if d.i-digits > 18 || d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return 0, false
	}
	n := 0
	for _, c := range d.b[digits:d.i] {
		n = n*10 + int(c-'0')
	}
	if d.b[start] == '-' {
		n = -n
	}
	return n, true
}

func (d *stateReader) boolean() (bool, bool) {
	d.space()
	for _, lit := range []string{"true", "false"} {
		if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
			d.i += len(lit)
			return lit == "true", true
		}
	}
	return false, false
}

// raw reads an object as a json.RawMessage: its text as it is, once
// checked to be valid JSON.
func (d *stateReader) raw() (json.RawMessage, bool) {
	d.space()
	start := d.i
	if !d.skip() {
		return nil, false
	}
	v := d.b[start:d.i]
	if v[0] != '{' || !json.Valid(v) {
		return nil, false
	}
	return append(json.RawMessage(nil), v...), true
}

// skip passes over one value: a string, or an object or array, to its
// matching end. Whether it is valid JSON is checked by the caller.
func (d *stateReader) skip() bool {
	depth := 0
	inString := false
	for d.i < len(d.b) {
		c := d.b[d.i]
		d.i++
		switch {
		case inString && c == '\\':
			d.i++
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

// strings reads an array of strings.
func (d *stateReader) strings() ([]string, bool) {
	out := []string{}
	return out, d.array(func() bool {
		s, ok := d.str()
		out = append(out, s)
		return ok
	})
}

// array reads an array, each element with elem.
func (d *stateReader) array(elem func() bool) bool {
	if !d.byte('[') {
		return false
	}
	if d.byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.byte(']') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// state reads a whole state, then nothing but white space.
func (d *stateReader) state(s *State) bool {
	ok := d.members(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "thread":
			s.Thread, ok = d.str()
			return 1 << 0, ok
		case "requester":
			s.Requester, ok = d.str()
			return 1 << 1, ok
		case "channel":
			s.Channel, ok = d.str()
			return 1 << 2, ok
		case "team":
			s.Team, ok = d.str()
			return 1 << 3, ok
		case "turn_by":
			s.TurnBy, ok = d.str()
			return 1 << 4, ok
		case "calls":
			s.Calls = []Call{}
			ok = d.array(func() bool {
				var c Call
				if !d.call(&c) {
					return false
				}
				s.Calls = append(s.Calls, c)
				return true
			})
			return 1 << 5, ok
		case "turns":
			s.Turns, ok = d.int()
			return 1 << 6, ok
		case "pass_turns":
			s.PassTurns, ok = d.int()
			return 1 << 7, ok
		}
		return 0, false
	})
	d.space()
	return ok && d.i == len(d.b)
}

// call reads a call as Call.UnmarshalJSON does.
func (d *stateReader) call(c *Call) bool {
	ok := d.members(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "key":
			c.Key, ok = d.str()
			return 1 << 0, ok
		case "id":
			c.ID, ok = d.str()
			return 1 << 1, ok
		case "tool":
			c.Tool, ok = d.str()
			return 1 << 2, ok
		case "args":
			c.Args, ok = d.raw()
			return 1 << 3, ok
		case "edited_args":
			c.EditedArgs, ok = d.raw()
			return 1 << 4, ok
		case "hash":
			c.Hash, ok = d.str()
			return 1 << 5, ok
		case "requester":
			c.Requester, ok = d.str()
			return 1 << 6, ok
		case "reason":
			c.Reason, ok = d.str()
			return 1 << 7, ok
		case "status":
			return 1 << 8, d.text(&c.Status)
		case "needs_approval":
			c.NeedsApproval, ok = d.boolean()
			return 1 << 9, ok
		case "rule":
			c.Rule = new(CallRule)
			return 1 << 10, d.rule(c.Rule)
		case "since":
			return 1 << 11, d.time(&c.Since)
		case "expires":
			return 1 << 12, d.time(&c.Expires)
		case "decision":
			c.Decision = new(Decision)
			return 1 << 13, d.decision(c.Decision)
		case "result":
			c.Result, ok = d.str()
			return 1 << 14, ok
		case "is_error":
			c.IsError, ok = d.boolean()
			return 1 << 15, ok
		case "attempts":
			c.Attempts, ok = d.int()
			return 1 << 16, ok
		case "unsent":
			c.Unsent, ok = d.int()
			return 1 << 17, ok
		case "approvals_required":
			c.ApprovalsRequired, ok = d.int()
			return 1 << 18, ok
		case "revision":
			c.Revision, ok = d.int()
			return 1 << 19, ok
		case "edited_by":
			c.EditedBy, ok = d.str()
			return 1 << 20, ok
		}
		return 0, false
	})
	if ok && c.Hash == "" && len(c.Args) > 0 && c.NeedsApproval {
		c.Hash = tools.ArgsHash(c.Tool, c.Args)
	}
	return ok
}

func (d *stateReader) rule(r *CallRule) bool {
	return d.members(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "approvers":
			r.Approvers, ok = d.strings()
			return 1 << 0, ok
		case "self_approval":
			r.SelfApproval, ok = d.boolean()
			return 1 << 1, ok
		}
		return 0, false
	})
}

func (d *stateReader) decision(dec *Decision) bool {
	return d.members(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "kind":
			return 1 << 0, d.text(&dec.Kind)
		case "by":
			dec.By, ok = d.str()
			return 1 << 1, ok
		case "at":
			return 1 << 2, d.time(&dec.At)
		case "args":
			dec.Args, ok = d.raw()
			return 1 << 3, ok
		case "reason":
			dec.Reason, ok = d.str()
			return 1 << 4, ok
		case "hash":
			dec.Hash, ok = d.str()
			return 1 << 5, ok
		case "approvals":
			dec.Approvals = []Approval{}
			ok = d.array(func() bool {
				var a Approval
				ok := d.members(func(k []byte) (uint32, bool) {
					var ok bool
					switch string(k) {
					case "by":
						a.By, ok = d.str()
						return 1 << 0, ok
					case "at":
						return 1 << 1, d.time(&a.At)
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
