package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/tools"
)

// Input requests: a call whose server needs input before it can go on
// (an MCP server's "input required" result) pauses the run like an
// approval. The call is saved asking, with what was asked, of whom (the
// call's requester), until when (its rule's expires_after) and the
// server's opaque state; nothing is held in memory and the lease is let
// go. The Asker shows each request to the person asked, once per pause
// (like a card); Answer, from any process, records an answer to one
// request, and once every request of the call is answered claims the
// call's decision (agent.Answer), which resumes the run like any other:
// the call is sent again, with the answers and the state, once, under the
// approval it had (no new card). An answer after the expiry is refused
// (ErrInputExpired), and the schedule expires the call: the model is
// told that nobody answered.

// Asker shows a call's input request to the person asked, in the call's
// thread. It is called on the run's goroutine, once per request and
// pause (a crash between showing and recording may show it twice).
// Implementations (the Slack front end's elicit.Elicitor) must be safe
// for concurrent use.
type Asker interface {
	Ask(ctx context.Context, q Question) error
}

// QuestionCloser is an Asker that also closes the questions of a call
// whose input expired unanswered, so that they say so. It is called on
// the run's goroutine; a failure is logged.
type QuestionCloser interface {
	CloseQuestion(ctx context.Context, q Question) error
}

// closeQuestions closes the questions of c, whose input expired.
func (s *Service) closeQuestions(ctx context.Context, thread string, c agent.Call) {
	ap := s.asker.Load()
	if ap == nil || c.Input == nil {
		return
	}
	qc, ok := (*ap).(QuestionCloser)
	if !ok {
		return
	}
	for _, r := range c.Input.Requests {
		q := Question{Thread: thread, Call: c.Key, Round: c.Attempts, Tool: c.Tool, Request: r, Of: c.Input.Of, Expires: c.Expires}
		if err := qc.CloseQuestion(ctx, q); err != nil {
			s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key}).WithError(err).Warn("closing an expired input request")
		}
	}
}

// Question is one input request of a call that asks.
type Question struct {
	Thread string
	// Call is the call's key; Round its attempt that asked, which an
	// answer names.
	Call  string
	Round int
	// Tool is the tool that asks, as the model calls it.
	Tool    string
	Request tools.InputRequest
	// Of is the person asked; Expires when the request expires.
	Of      string
	Expires time.Time
}

// SetAsker sets who shows input requests. Without one, a tool asks
// during the call (tools.Elicitor) instead of pausing the run. It may be
// called at any time, typically once, by the wiring of a front end.
func (s *Service) SetAsker(a Asker) { s.asker.Store(&a) }

// AsksForInput implements agent.InputAsker.
func (s *Service) AsksForInput() bool {
	a := s.asker.Load()
	return a != nil && *a != nil
}

var _ agent.InputAsker = (*Service)(nil)

// InputAnswer is a person's answer to one input request of a call, as a
// front end received it.
type InputAnswer struct {
	Thread string
	Call   string
	Round  int
	// Request is the request's key (tools.InputRequest.Key).
	Request string
	By      string
	Answer  tools.ElicitAnswer
}

// Errors of answering.
var (
	// ErrInputExpired: the request expired before the answer came.
	ErrInputExpired = errors.New("this request for input has expired")
	// ErrAnswered: the request has another answer already.
	ErrAnswered = errors.New("this request for input was answered already")
)

// inputKey is the claim of the answer to request of c's pause.
func inputKey(call string, round int, request string) string {
	return fmt.Sprintf("input:%s#%d:%s", call, round, request)
}

// Answer records a's answer. Only the person asked may answer
// (*RefusedError otherwise, audited); the first answer to a request
// counts (ErrAnswered for another one; the same answer again is
// accepted); an answer after the request's expiry is refused with
// ErrInputExpired; one to a request that no longer waits gets
// ErrNotPending. When every request of the call is answered, the call's
// decision is claimed like any other (which may take the thread's lease,
// see Decide): the caller then calls Drive, in the background. Several
// processes may call Answer at once.
func (s *Service) Answer(ctx context.Context, a InputAnswer) error {
	res, err := s.graph.State(ctx, a.Thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return ErrNotPending
	}
	if err != nil {
		return err
	}
	c, ok := res.State.Call(a.Call)
	if !ok || c.Status != agent.Asking || c.Attempts != a.Round || c.Input == nil {
		return ErrNotPending
	}
	if _, ok := c.Input.Request(a.Request); !ok {
		return ErrNotPending
	}
	log := s.log.WithFields(logrus.Fields{"thread": a.Thread, "call": a.Call, "by": a.By})
	if a.By == "" || a.By != c.Input.Of {
		r := refused(Part{Text: "only "}, Part{People: []string{c.Input.Of}}, Part{Text: " may answer this request"})
		s.audit(ctx, a.Thread, *c, map[string]string{"decision": "refused", "attempted": agent.Answer.String(), "by": a.By, "reason": r.Why})
		log.Info("answer refused")
		return r
	}
	now := s.opts.Now()
	if !c.Expires.IsZero() && !now.Before(c.Expires) {
		return ErrInputExpired
	}
	switch a.Answer.Action {
	case tools.ElicitAccept, tools.ElicitDecline, tools.ElicitCancel:
	default:
		return fmt.Errorf("answer: unknown action %q", a.Answer.Action)
	}
	a.Answer.By = a.By
	raw, err := json.Marshal(a.Answer)
	if err != nil {
		return err
	}
	winner, won, err := s.store.Claim(ctx, a.Thread, inputKey(c.Key, c.Attempts, a.Request), raw)
	if err != nil {
		return fmt.Errorf("claim answer on %s: %w", c.Key, err)
	}
	if !won && !bytes.Equal(winner, raw) {
		return ErrAnswered
	}
	log.WithFields(logrus.Fields{"request": a.Request, "action": string(a.Answer.Action)}).Info("input request answered")
	// Every request answered: the call's decision, claimed like any
	// other, resumes the run.
	keys := make([]string, len(c.Input.Requests))
	for i, r := range c.Input.Requests {
		keys[i] = inputKey(c.Key, c.Attempts, r.Key)
	}
	got, err := s.store.ClaimValues(ctx, a.Thread, keys)
	if err != nil {
		return err
	}
	answers := make(map[string]tools.ElicitAnswer, len(keys))
	for i, r := range c.Input.Requests {
		v, ok := got[keys[i]]
		if !ok {
			return nil // the others are still to be answered
		}
		var ans tools.ElicitAnswer
		if err := json.Unmarshal(v, &ans); err != nil {
			return fmt.Errorf("answer to %s: %w", r.Key, err)
		}
		answers[r.Key] = ans
	}
	d := agent.Decision{Kind: agent.Answer, By: a.By, At: now, Answers: answers}
	err = s.claim(ctx, a.Thread, *c, d, "")
	var first *AlreadyDecidedError
	if errors.As(err, &first) && first.Decision.Kind == agent.Answer {
		return nil // another answer of the same pause claimed it
	}
	return err
}

// ask shows the input requests of c, a call that asks.
func (s *Service) ask(ctx context.Context, thread string, c agent.Call) error {
	ap := s.asker.Load()
	if ap == nil || *ap == nil || c.Input == nil || c.Input.Connect != "" {
		return nil // a Connect prompt was shown by the call itself
	}
	var errs []error
	for _, r := range slices.Clone(c.Input.Requests) {
		q := Question{Thread: thread, Call: c.Key, Round: c.Attempts, Tool: c.Tool, Request: r, Of: c.Input.Of, Expires: c.Expires}
		if err := (*ap).Ask(ctx, q); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key}).WithError(err).Warn("showing input requests")
		return err
	}
	return nil
}

// Connection says that the requester of a call that waits for them to
// connect to an MCP server (auth: requester) has connected.
type Connection struct {
	Thread, Call string
	Round        int
	Server, User string
}

// Connected resumes the call c names, which waited for its requester to
// connect to its server: the call's decision is claimed (once; a second
// callback changes nothing) and the caller then calls Drive. It returns
// ErrNotPending when the call no longer waits for that connection.
// Several processes may call it at once.
//
// The call asks its requester to connect before its run has saved the
// pause: someone who connects at once can come back before that save.
// When the call is not found waiting, Connected waits for the run that
// holds the thread to let go of it (as a reply does), and looks again.
func (s *Service) Connected(ctx context.Context, c Connection) error {
	err := s.connected(ctx, c)
	if !errors.Is(err, ErrNotPending) {
		return err
	}
	err = s.withLeaseWithin(ctx, c.Thread, s.opts.LeaseTTL+s.opts.BusyWait, func(context.Context, *session) error {
		return errLookAgain
	})
	if !errors.Is(err, errLookAgain) {
		return err
	}
	return s.connected(ctx, c)
}

// errLookAgain: the thread is free now; look at it again.
var errLookAgain = errors.New("look again")

// connected is Connected as the thread stands.
func (s *Service) connected(ctx context.Context, c Connection) error {
	res, err := s.graph.State(ctx, c.Thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return ErrNotPending
	}
	if err != nil {
		return err
	}
	call, ok := res.State.Call(c.Call)
	if !ok || call.Status != agent.Asking || call.Attempts != c.Round || call.Input == nil ||
		call.Input.Connect != c.Server || call.Input.Of != c.User {
		return ErrNotPending
	}
	d := agent.Decision{Kind: agent.Answer, By: c.User, At: s.opts.Now()}
	err = s.claim(ctx, c.Thread, *call, d, "")
	var first *AlreadyDecidedError
	if errors.As(err, &first) {
		return nil
	}
	return err
}

// askingReason says, for the audit trail, what a call that asks waits
// for: never the questions' text or the server's state.
func askingReason(c agent.Call) string {
	if c.Input != nil && c.Input.Connect != "" {
		return "waits for " + c.Input.Of + " to connect to " + c.Input.Connect
	}
	n := 0
	if c.Input != nil {
		n = len(c.Input.Requests)
	}
	return fmt.Sprintf("the server asked for input (%d request(s)); waits for the answers", n)
}
