package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
)

// ErrNotChanged: RestartChanged or CancelChanged was asked of a thread
// that the running bot can resume as it is (someone already restarted or
// cancelled it, or it is not waiting at all).
var ErrNotChanged = errors.New("the thread's run can go on as it is")

// RestartChanged goes on with a thread whose run the bot cannot resume
// since an update (see GraphChanged): the calls that had not run are
// reported to the model as not run, and the model plans again from its
// last step. Like Retry, it is for the person who asked for the turn or
// someone the policy lets decide the run's calls, in the thread's own
// channel; others get a *RefusedError.
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
		why := ""
		if m.Channel != st.Channel || (st.Team != "" && m.Team != st.Team) {
			why = "this card belongs to another channel"
		} else {
			why = s.mayRetry(ctx, m.Thread, st, m.By)
		}
		if why != "" {
			s.audit(ctx, thread, agent.Call{}, map[string]string{"decision": "refused", "attempted": how, "by": m.By, "reason": why})
			return &RefusedError{Why: why}
		}
		s.audit(ctx, thread, agent.Call{}, map[string]string{"decision": how + "_after_update", "by": m.By})
		run := s.begin(thread, how+" after an update").WithField("by", m.By)
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
	seen, err := s.store.Claims(ctx, thread)
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
