package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/tools"
)

// ErrNotChanged: RestartChanged or CancelChanged was asked of a thread
// that the running bot can resume as it is (someone already restarted or
// cancelled it, or it is not waiting at all).
var ErrNotChanged = errors.New("the thread's run can go on as it is")

// RestartChanged goes on with a thread whose run the bot cannot resume
// since an update (see GraphChanged): the calls that had not run are
// reported to the model as not run, and the model plans again from its
// last step. It is for the person who asked for the turn, or someone the
// rule in force when a call of the run began to wait lets approve that
// call (see mayChange), in the thread's own channel; others get a
// *RefusedError.
func (s *Service) RestartChanged(ctx context.Context, m Message) error {
	return s.onChanged(ctx, m, "restart", s.agent.Restart)
}

// CancelChanged ends such a run without running anything; a reply in the
// thread starts a new turn. Who may is as for RestartChanged.
func (s *Service) CancelChanged(ctx context.Context, m Message) error {
	return s.onChanged(ctx, m, "cancel", func(ctx context.Context, thread string) (*graph.Result[agent.State], error) {
		return s.agent.Cancel(ctx, thread, m.By)
	})
}

func (s *Service) onChanged(ctx context.Context, m Message, how string, fn func(context.Context, string) (*graph.Result[agent.State], error)) error {
	thread := m.Thread
	return s.withLease(ctx, thread, func(ctx context.Context, ss *session) error {
		err := s.graph.Check(ctx, thread)
		if err == nil {
			return fmt.Errorf("%s %s: %w", how, thread, ErrNotChanged)
		}
		if !errors.Is(err, graph.ErrIncompatible) {
			return err
		}
		res, err := s.graph.State(ctx, thread)
		if err != nil {
			return err
		}
		st := &res.State
		var why *RefusedError
		if m.Channel != st.Channel || (st.Team != "" && m.Team != st.Team) {
			why = refusedText("this card belongs to another channel")
		} else {
			why = s.mayChange(ctx, m.Thread, st, m.By)
		}
		if why != nil && why.TryAgain {
			return why // not an answer about the person: nothing to audit
		}
		if why != nil {
			s.audit(ctx, thread, agent.Call{}, map[string]string{"decision": "refused", "attempted": how, "by": m.By, "reason": why.Why})
			return why
		}
		s.audit(ctx, thread, agent.Call{}, map[string]string{"decision": how + "_after_update", "by": m.By})
		run := s.begin(thread, how+" after an update", logrus.Fields{"by": m.By})
		res, err = fn(ctx, thread)
		s.after(ctx, run, ss, res, err)
		return nil
	})
}

// graphChanged shows people, once per checkpoint, that err is the
// update's fault, and reports whether it was (err is an
// *IncompatibleError). The run is left as it was saved.
func (s *Service) graphChanged(ctx context.Context, log logrus.FieldLogger, thread string, err error) bool {
	var inc *graph.IncompatibleError
	if !errors.As(err, &inc) {
		return false
	}
	log.WithField("changes", len(inc.Changes)).WithError(err).Warn("the run cannot go on under this version of the bot")
	res, err := s.graph.State(ctx, thread)
	if err != nil {
		log.WithError(err).Warn("reading the thread")
		return true
	}
	key := "changed:" + res.Checkpoint.ID
	seen, err := s.store.ClaimValues(ctx, thread, []string{key})
	if err != nil {
		log.WithError(err).Warn("reading what was delivered")
		return true
	}
	if _, done := seen[key]; done {
		return true
	}
	text := strings.Join(agent.Incompatible(inc.Changes), "\n")
	if s.report(ctx, Event{Kind: GraphChanged, Thread: thread, State: &res.State, Text: text}) == nil {
		if _, _, err := s.store.Claim(ctx, thread, key, []byte("1")); err != nil {
			log.WithError(err).Warn("recording a delivery")
		}
	}
	return true
}

// mayChange says why by may not restart or cancel the run of st, which
// the running bot cannot resume, or nil. The person who asked for the
// turn may; so may whoever the rule in force when one of the run's calls
// began to wait lets approve that call — the rule recorded on the call,
// which holds even when the update removed the tool. A call saved before
// calls recorded their rule is judged by its tool's rule now, if the tool
// is still offered, else lets nobody else decide. A run without calls
// (a failed one) is judged as for Retry.
func (s *Service) mayChange(ctx context.Context, thread string, st *agent.State, by string) *RefusedError {
	if by == "" || strings.ContainsAny(by, "\t\n\r") {
		return refusedText("the person deciding is unknown")
	}
	if by == turnBy(st) {
		return nil
	}
	if len(st.Calls) == 0 {
		return s.mayRetry(ctx, thread, st, by)
	}
	for i := range st.Calls {
		c := &st.Calls[i]
		if c.Status.Settled() {
			continue
		}
		rule, ok := s.ruleAtWait(c)
		if !ok {
			continue
		}
		may, _, err := rule.MayApprove(by, c.AskedBy(st), s.inGroup(ctx))
		if err != nil {
			s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key}).WithError(err).Warn("checking who may decide")
			return tryAgain("I couldn't check whether you may decide this request; please try again")
		}
		if may {
			return nil
		}
	}
	return refusedText("only the person who asked, or someone who may approve its calls, may restart or cancel this request")
}

// ruleAtWait is the rule c waited under: the one recorded on it when it
// began to wait, else its tool's rule now; false if neither is known or
// the call needs nobody's approval.
func (s *Service) ruleAtWait(c *agent.Call) (tools.Rule, bool) {
	if c.Rule != nil {
		return tools.Rule{Approval: tools.ApprovalRequired, Approvers: c.Rule.Approvers, SelfApproval: c.Rule.SelfApproval}, true
	}
	rule, ok := s.agent.Rule(c.Tool)
	if !ok || !rule.NeedsApproval() {
		return tools.Rule{}, false
	}
	return rule, true
}

// Changed says, in words for people, why the running bot cannot resume the
// thread's run as it was saved (one change an entry), or nothing if it can.
func (s *Service) Changed(ctx context.Context, thread string) ([]string, error) {
	err := s.graph.Check(ctx, thread)
	var inc *graph.IncompatibleError
	if errors.As(err, &inc) {
		return agent.Incompatible(inc.Changes), nil
	}
	return nil, err
}
