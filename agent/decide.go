package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

// Errors of applying decisions. A modifier that returns one of them
// changes nothing: the resume is abandoned before anything is saved.
var (
	// ErrUnknownCall: no current call has that key.
	ErrUnknownCall = errors.New("no such tool call")
	// ErrNothingToApply: none of the given decisions or expiries applies.
	ErrNothingToApply = errors.New("nothing to apply")
	// ErrStaleDecision: the decision was made on other arguments than the
	// call has now.
	ErrStaleDecision = errors.New("the decision is about other arguments")
	// ErrNotSent: a run stopped before sending an approved call, which
	// waits, approved, for the run to be retried (Call.Unsent).
	ErrNotSent = errors.New("the call was not sent")
)

// DecidedError says a call is no longer waiting for a decision, and who
// settled it.
type DecidedError struct {
	Key    string
	Status CallStatus
	By     string
}

func (e *DecidedError) Error() string {
	if e.By != "" {
		return fmt.Sprintf("call %s is already %s by %s", e.Key, e.Status, e.By)
	}
	return fmt.Sprintf("call %s is already %s", e.Key, e.Status)
}

// Decide returns a state modifier that applies decisions, keyed by call
// key. Every decision must name a call that waits for one: otherwise the
// modifier fails with ErrUnknownCall or a *DecidedError and nothing is
// applied. Edited arguments must be valid for the tool: a checked claim
// (see CheckDecision) is taken as it is.
func (a *Agent) Decide(decisions map[string]Decision) graph.StateModifier[State] {
	return func(_ context.Context, _ graph.NodePath, s *State) error {
		if len(decisions) == 0 {
			return ErrNothingToApply
		}
		// All are checked before any is applied. A few (one, as a
		// click decides) are kept on the stack, not in a map.
		type keyed struct {
			key string
			d   Decision
		}
		var few [2]keyed
		checked := few[:0]
		for key, d := range decisions {
			ok, err := a.checkDecision(s, key, d)
			if err != nil {
				return err
			}
			checked = append(checked, keyed{key, ok})
		}
		for _, k := range checked {
			c, _ := s.Call(k.key)
			apply(c, k.d)
		}
		return nil
	}
}

// DecideOne is Decide of the one decision d on the call with key,
// without a map made for it (a click decides one call).
func (a *Agent) DecideOne(key string, d Decision) graph.StateModifier[State] {
	return func(_ context.Context, _ graph.NodePath, s *State) error {
		ok, err := a.checkDecision(s, key, d)
		if err != nil {
			return err
		}
		c, _ := s.Call(key)
		apply(c, ok)
		return nil
	}
}

// CheckDecision reports why d cannot be applied to the call with key in
// state s, or nil if it can.
//
// An Edit is a checked claim when its Hash is tools.ArgsHash of the tool
// and its Args: runner.Decide canonicalised and validated those arguments
// once, under the tool's rule, before it claimed the decision, and the
// hash binds them. Such an edit is trusted as it is; any other edit (no
// hash, or one that is not its arguments') is canonicalised and checked
// against the tool's schema here, and one whose hash is not that of its
// canonical arguments is refused.
func (a *Agent) CheckDecision(s *State, key string, d Decision) error {
	_, err := a.checkDecision(s, key, d)
	return err
}

// checkDecision is CheckDecision; it returns d as apply takes it: an
// edit's arguments canonical, with their hash.
func (a *Agent) checkDecision(s *State, key string, d Decision) (Decision, error) {
	if err := d.Validate(); err != nil {
		return d, err
	}
	c, ok := s.Call(key)
	if !ok {
		return d, fmt.Errorf("%w: %s", ErrUnknownCall, key)
	}
	if !c.Status.Waiting() {
		e := &DecidedError{Key: key, Status: c.Status}
		if c.Decision != nil {
			e.By = c.Decision.By
		}
		return d, e
	}
	switch {
	case c.Status == Asking && d.Kind != Answer && d.Kind != Expire,
		c.Status != Asking && d.Kind == Answer:
		return d, fmt.Errorf("a %s decision does not apply to a %s call", d.Kind, c.Status)
	case d.Kind == Answer:
		for _, r := range c.Input.Requests {
			if _, ok := d.Answers[r.Key]; !ok {
				return d, fmt.Errorf("the answer decision on %s does not answer %q", key, r.Key)
			}
		}
		return d, nil
	case d.Kind == Edit && c.Status == Pending:
		if len(d.Args) > 0 && d.Hash != "" && d.Hash == tools.ArgsHash(c.Tool, d.Args) {
			return d, nil // a checked claim
		}
		args, err := tools.Canonical(d.Args)
		if err != nil {
			return d, err
		}
		if err := a.box.Validate(c.Tool, args); err != nil {
			return d, err
		}
		hash := tools.ArgsHash(c.Tool, args)
		if d.Hash != "" && d.Hash != hash {
			return d, fmt.Errorf("%w: the edit's hash is not that of its arguments", ErrStaleDecision)
		}
		d.Args, d.Hash = args, hash
	case d.Kind == Approve && d.Hash != "" && d.Hash != c.RunHash():
		return d, fmt.Errorf("%w: call %s has other arguments than the ones approved", ErrStaleDecision, key)
	case d.Kind == Edit, d.Kind == MarkDone && c.Status != Unknown,
		d.Kind == Expire && c.Status != Pending && c.Status != Asking:
		return d, fmt.Errorf("a %s decision does not apply to a %s call", d.Kind, c.Status)
	}
	return d, nil
}

// apply records d on a waiting call, as checkDecision returned it (an
// edit's arguments canonical, with their hash).
// Respond is a rejection with the person's text as the reason. An
// approval without a hash is bound to the arguments the call has now. An
// edit of a call that needs several approvals replaces its arguments and
// leaves it pending, in its next revision.
func apply(c *Call, d Decision) {
	if c.Status == Asking {
		answer(c, d)
		return
	}
	c.Decision = &d
	switch d.Kind {
	case Approve:
		c.Status = Approved
		if d.Hash == "" {
			c.Decision.Hash = c.RunHash()
		}
	case Edit:
		args := d.Args
		if c.Quorum() > 1 {
			// Several people approve a call: an edit is a new proposal,
			// which waits for their approvals again.
			c.Decision, c.EditedArgs, c.EditedBy = nil, args, d.By
			c.Revision++
			return
		}
		c.Status, c.EditedArgs = Edited, args
	case Reject, Respond:
		c.Status, c.IsError = Rejected, true
		if c.Attempts > 0 {
			c.Result = fmt.Sprintf("Skipped by %s after the call was interrupted; it may or may not have had its effect.", mention(d.By))
		} else {
			c.Result = "Rejected by " + mention(d.By)
		}
		if d.Reason != "" {
			c.Result += ": " + d.Reason
		} else {
			c.Result += "."
		}
	case MarkDone:
		c.Status, c.IsError = Done, false
		c.Result = fmt.Sprintf("The call was interrupted while running; %s checked and marked it as done.", mention(d.By))
	case Expire:
		c.Status, c.IsError = Expired, true
		c.Result = "The request for approval expired before anyone decided; the call was not run."
	}
}

// answer applies d to a call that asks for input. The call keeps the
// decision that let it run: it is sent again with the answers under it.
// A request declined or cancelled settles the call there — the model is
// told who declined what — and the call is not sent again.
func answer(c *Call, d Decision) {
	in := c.Input
	if d.Kind == Expire && in.Connect != "" {
		c.Status, c.IsError = Expired, true
		c.Result = fmt.Sprintf("Error: %s did not connect to the MCP server %q before the request expired; the call was not sent.", mention(in.Of), in.Connect)
		c.Input = nil
		return
	}
	if d.Kind == Expire {
		c.Status, c.IsError = Expired, true
		c.Result = fmt.Sprintf("Error: %s did not answer the tool's request for input (%q) before it expired; the call was not completed.",
			mention(in.Of), firstMessage(in))
		c.Input = nil
		return
	}
	for _, r := range in.Requests {
		a := d.Answers[r.Key]
		if a.Action == tools.ElicitAccept {
			continue
		}
		verb := "declined"
		if a.Action == tools.ElicitCancel {
			verb = "cancelled"
		}
		c.Status, c.IsError = Rejected, true
		c.Result = fmt.Sprintf("Error: %s %s the tool's request for input (%q); the call was not completed.", mention(cmp.Or(a.By, d.By)), verb, r.Message)
		c.Input = nil
		return
	}
	in.Answers = d.Answers
	c.Status = Approved
}

// firstMessage is what an input pause asked first.
func firstMessage(in *CallInput) string {
	if len(in.Requests) == 0 {
		return ""
	}
	return in.Requests[0].Message
}

// UserTurn returns a state modifier that adds by's message to a finished
// conversation, for Graph.Continue. by becomes the requester of the calls
// the model makes in answer.
func UserTurn(by, text string) graph.StateModifier[State] {
	return func(_ context.Context, _ graph.NodePath, s *State) error {
		s.Messages = append(s.Messages, llm.Message{Role: llm.RoleUser, Content: text})
		s.PassTurns = 0
		s.TurnBy = by
		return nil
	}
}

// AddNote returns a state modifier that keeps n for the model, to be
// handed over with the results of the calls that wait.
func AddNote(n Note) graph.StateModifier[State] {
	return func(_ context.Context, _ graph.NodePath, s *State) error {
		s.Notes = append(s.Notes, n)
		return nil
	}
}

// Rule returns the policy rule of an offered tool.
func (a *Agent) Rule(tool string) (tools.Rule, bool) {
	_, r, ok := a.box.Lookup(tool)
	return r, ok
}

// Tools returns the offered tools.
func (a *Agent) Tools() []tools.Tool { return a.box.Tools() }

// ValidateArgs checks edited arguments for a tool, for a form to show.
func (a *Agent) ValidateArgs(tool string, args json.RawMessage) error {
	return a.box.Validate(tool, args)
}
