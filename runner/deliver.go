package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/logtext"
)

// Delivery: after a run stops, people are shown what it produced —
// answers, cards, errors — each shown first and recorded after, so that a
// crash in between shows it twice rather than never.

// begin counts a run that starts or resumes and returns its logger,
// with the thread, how the run began, an ID of its own so that its lines
// can be told from those of the thread's other runs, and fields (nil:
// none; begin keeps the map). The logger is built once, with all of
// them, for every line of the run. The start is logged at debug level:
// at info, a run says where it stopped (paused, finished, failed), with
// the same fields, and the decisions and tool calls in between have
// lines of their own.
func (s *Service) begin(thread, how string, fields logrus.Fields) logrus.FieldLogger {
	s.opts.Observer.RunStarted(how != "start" && how != "continue")
	var b [6]byte
	_, _ = rand.Read(b[:])
	if fields == nil {
		fields = make(logrus.Fields, 3)
	}
	var run [2 * len(b)]byte
	hex.Encode(run[:], b[:])
	fields["thread"], fields["run"], fields["how"] = thread, string(run[:]), how
	log := logtext.With(s.log, fields)
	if logs(log, logrus.DebugLevel) {
		log.Debug("run started")
	}
	return log
}

// logs reports whether log writes lines of level. Asked before a line
// that is mostly not written (logrus makes the slice of a line's
// arguments before it looks at the level).
func logs(log logrus.FieldLogger, level logrus.Level) bool {
	switch l := log.(type) {
	case *logrus.Entry:
		return l.Logger.IsLevelEnabled(level)
	case *logrus.Logger:
		return l.IsLevelEnabled(level)
	}
	return true
}

// after logs where a run stopped, shows people what it produced, and
// sets the thread's next wake-up.
func (s *Service) after(ctx context.Context, log logrus.FieldLogger, ss *session, res *graph.Result[agent.State], err error) {
	thread := ss.thread
	ss.res = res
	if res == nil && (errors.Is(err, graph.ErrConflict) || errors.Is(err, ErrLeaseLost) || errors.Is(context.Cause(ctx), ErrLeaseLost)) {
		log.WithError(err).Warn("this process lost the thread; the process that holds it carries the run on")
		return
	}
	if res == nil && s.graphChanged(ctx, log, thread, err) {
		return
	}
	if res == nil {
		log.WithError(err).Error("run could not be saved")
		_ = s.report(ctx, Event{Kind: RunFailed, Thread: thread, Text: err.Error()})
		return
	}
	s.opts.Observer.RunStopped(res.Status())
	// The line's fields, made for it: the run's are added to them.
	if res.Status() == graph.Paused {
		log = logtext.With(log, logrus.Fields{"checkpoint": res.Checkpoint.ID, "waiting": res.State.NumWaiting()})
	} else {
		log = logtext.With(log, logrus.Fields{"checkpoint": res.Checkpoint.ID})
	}
	switch res.Status() {
	case graph.Paused:
		log.Info("run paused for approval")
	case graph.Failed:
		if n, auto := s.retriesUnsent(res); auto {
			log.WithError(err).WithField("unsent", n).Warn("run stopped before sending a call; it is retried")
			break
		}
		failed := log.WithError(err)
		if res.Checkpoint.Final {
			failed = failed.WithField("final", true) // a retry cannot help: none is offered
		}
		failed.Error("run failed")
	case graph.Done:
		log.Info("run finished")
	}
	// What to deliver is judged by the claims read when the session
	// began: records of deliveries are written under the lease, or by
	// the process that held it after its last save let go (pending.go),
	// and the calls this run made wait in a round of their own, which
	// nobody can have been shown yet.
	if !s.deliveredAll(thread, s.deliver(ctx, log, ss, res)) {
		// Slack (or whatever shows events) failed; try again shortly.
		ss.redeliver = true
	}
	ss.schedule = true
	ss.wake, ss.waiting = s.planNext(res)
	ss.inbox = res
	if closed, _ := ss.ending().result(); closed {
		// The last save ended the session: what was shown is recorded
		// with the thread's next step, or on its own, and the recovery
		// wake-up it set stays if anything is left to show.
		end := ss.ending()
		set := end.Closing.Wake
		s.holdRecords(thread, &shownRecords{record: ss.record, answered: ss.answered,
			move: !ss.redeliver && !set.Equal(end.planned), set: set, planned: end.planned})
		ss.record, ss.answered = nil, -1
	}
}

// deliveredAll notes whether everything of thread was delivered (ok),
// for the tick that drove it (Tick), and returns ok.
func (s *Service) deliveredAll(thread string, ok bool) bool {
	if ok {
		s.undelivered.Delete(thread)
	} else {
		s.undelivered.Store(thread, struct{}{})
	}
	return ok
}

// redeliverAfter is how soon undelivered answers and cards are tried
// again.
const redeliverAfter = 30 * time.Second

// deliver shows people what the thread holds and they have not seen: the
// agent's answers, a card for each call that waits, the error of a failed
// run. Each is shown first and recorded (a set-once claim) after, so a
// crash in between shows it twice rather than never; any later drive of
// the thread — the schedule's recovery wake-up included — delivers what
// is missing. It reports whether everything was delivered. The caller
// holds the thread's lease.
func (s *Service) deliver(ctx context.Context, log logrus.FieldLogger, ss *session, res *graph.Result[agent.State]) bool {
	thread := ss.thread
	ok := true
	show := func(key string, e Event) {
		if _, done := ss.claims[key]; done {
			return
		}
		if err := s.report(ctx, e); err != nil {
			ok = false
			return
		}
		ss.claims[key] = []byte("1")
		ss.record = append(ss.record, key)
	}
	st := &res.State
	unshown, err := s.unshownAnswers(ctx, ss, st)
	if err != nil {
		log.WithError(err).Warn("reading what was delivered")
		return false
	}
	answered := len(st.Messages)
	for _, i := range unshown {
		e := Event{Kind: Answer, Thread: thread, State: st, Text: st.Messages[i].Content, Message: i}
		if cc := st.Cancelled; cc != nil && cc.Message == i {
			e = Event{Kind: RunCancelled, Thread: thread, State: st, People: []string{cc.By}, Message: i}
		}
		if err := s.report(ctx, e); err != nil {
			answered, ok = i, false
			break
		}
	}
	// The count moves when answers were shown (or the thread has none
	// yet): messages that are not answers need no record, and a count
	// that stays spares the session's end a write.
	if _, had := ss.claims[answeredKey]; len(unshown) > 0 || !had {
		ss.answered = max(ss.answered, answered)
		ss.claims[answeredKey] = []byte(strconv.Itoa(answered))
	}
	switch res.Status() {
	case graph.Paused:
		// A pause can be reached again (one of several calls decided):
		// each call's card is shown once per decision round.
		for c := range st.AllWaiting() {
			announced := announceKey(c)
			if _, done := ss.claims[announced]; !done {
				if s.heldElsewhere(ss, c) && !s.awaitCard(ctx, ss, ss.from, st, c) {
					// Its card is being shown by the process that
					// paused the run; should it have died, the
					// recovery wake-up shows it.
					ok = false
					continue
				}
				if ss.found != nil {
					// An approval that came before the card was
					// recorded; the card is shown here if the record
					// does not come (its process died).
					s.awaitCard(ctx, ss, ss.found, st, c)
				}
			}
			if c.Status == agent.Asking {
				// Its input requests, shown once per pause.
				if _, done := ss.claims[announced]; done {
					continue
				}
				if err := s.ask(ctx, thread, c); err != nil {
					ok = false
					continue
				}
				ss.claims[announced] = []byte("1")
				ss.record = append(ss.record, announced)
				continue
			}
			gate := s.gate(st, c, ss.claims)
			_, posted := ss.claims[announced]
			card := Event{Kind: ApprovalNeeded, Thread: thread, State: st, Call: &c, Gate: gate, Copies: s.copies(c)}
			if !posted {
				card.Again = ss.mayBeShown(c)
			}
			show(announced, card)
			if gate == nil || gate.Required < 2 {
				continue
			}
			// A call that needs several approvals: its card shows each
			// new count, and an edit's reset, once.
			key := progressKey(c, len(gate.Approvals))
			if !posted {
				if _, shown := ss.claims[key]; !shown {
					ss.claims[key] = []byte("1") // the card just posted shows it
					ss.record = append(ss.record, key)
				}
			} else if len(gate.Approvals) > 0 || c.Revision > 0 {
				show(key, Event{Kind: ApprovalProgress, Thread: thread, State: st, Call: &c, Gate: gate})
			}
		}
	case graph.Failed:
		if _, auto := s.retriesUnsent(res); auto {
			break // nothing was sent, and the schedule retries it
		}
		show("failed:"+res.Checkpoint.ID, Event{Kind: RunFailed, Thread: thread, State: st, Text: failureText(res.Checkpoint.Error), Final: res.Checkpoint.Final})
	}
	return ok
}

// report shows e; a failure is logged and returned.
func (s *Service) report(ctx context.Context, e Event) error {
	err := s.rep.Report(ctx, e)
	if err != nil {
		s.log.WithFields(logrus.Fields{"thread": e.Thread, "event": e.Kind.String()}).WithError(err).Warn("reporting")
	}
	return err
}

// OnCall is the agent's hook for call progress: runner.New makes
// it the agent's, so people see calls start and finish.
func (s *Service) OnCall(ctx context.Context, st *agent.State, c agent.Call) {
	kind := CallFinished
	switch c.Status {
	case agent.Running:
		kind = CallStarted
	case agent.Asking:
		// Not finished: it waits for input (or a connection), which the
		// pause shows; the trail says this attempt ended so, and its
		// card what it waits for.
		s.auditOutcome(ctx, st, c, "asking", map[string]string{"reason": askingReason(c)})
	default:
		s.opts.Observer.ToolFinished(c.Tool, c.Status)
		s.auditFinished(ctx, st, c)
	}
	_ = s.report(ctx, Event{Kind: kind, Thread: runThread(ctx, st), State: st, Call: &c})
}

// FinalError is the answer to a Retry of a run that failed in a way a
// retry cannot fix (graph.Checkpoint.Final), and to a reply in its
// thread: nothing is run. Text is the failure, for people, as its
// RunFailed event showed it; it says what to do instead when its cause
// knows (a conversation too long for the model: start a new thread).
type FinalError struct{ Text string }

func (e *FinalError) Error() string { return "the run failed in a way a retry cannot fix: " + e.Text }

// finalFailure is the FinalError of the run at res if it failed for
// good, else nil. A failure saved before the mark existed is retryable.
func finalFailure(res *graph.Result[agent.State]) error {
	if res == nil || res.Status() != graph.Failed || !res.Checkpoint.Final {
		return nil
	}
	return &FinalError{Text: failureText(res.Checkpoint.Error)}
}

// failureText is a failed run's error for people: without the engine's
// "node model: " prefix, and saying the model's name once.
func failureText(err string) string {
	_, rest, ok := strings.Cut(err, ": ")
	if !ok || !strings.HasPrefix(err, "node ") {
		return err
	}
	// "model NAME: … NAME: …" → "model NAME: …": the model's client
	// names itself already.
	if after, found := strings.CutPrefix(rest, "model "); found {
		if name, tail, ok := strings.Cut(after, ": "); ok && strings.Contains(tail, name+": ") {
			return "the model failed: " + strings.Replace(tail, name+": ", "", 1) + " (" + name + ")"
		}
	}
	return rest
}
