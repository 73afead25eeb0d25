package runner

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
)

// Schedule keeps, per thread, when the service must look at it again
// without any request arriving: when its pending calls expire, or when a
// run that is working should have finished (so that a run cut off by a
// crash is recovered). It lives in the store, so it survives restarts and
// every replica sees it.
type Schedule interface {
	// Wake sets when thread is to be looked at.
	Wake(ctx context.Context, thread string, at time.Time) error
	// WakeBy makes sure thread is looked at no later than at: it moves
	// an existing wake-up earlier, never later.
	WakeBy(ctx context.Context, thread string, at time.Time) error
	// Due returns up to n threads whose time has come.
	Due(ctx context.Context, now time.Time, n int) ([]string, error)
	// Forget removes thread from the schedule.
	Forget(ctx context.Context, thread string) error
	// SetWaiting records how many of the thread's calls wait for a
	// person (0 forgets the thread), so that the total can be reported.
	SetWaiting(ctx context.Context, thread string, n int) error
}

// Observer is told what the service does, for metrics. Its methods must
// be cheap and safe for concurrent use.
type Observer interface {
	// RunStarted: a run of a thread began (a request, a new turn), or
	// resumed (after a decision, a retry, a crash) when resumed is true.
	RunStarted(resumed bool)
	// RunStopped: a run stopped paused, done or failed.
	RunStopped(status graph.Status)
	// Decided: a decision (or an expiry) was claimed, waited after the
	// call asked for it (0 when unknown).
	Decided(kind agent.Kind, waited time.Duration)
	// ToolFinished: a call ran, with this outcome (done or failed).
	ToolFinished(tool string, status agent.CallStatus)
}

// Auditor keeps the audit trail (see audit.go for what it records). It
// must be safe for concurrent use.
type Auditor interface {
	// Audit appends one entry.
	Audit(ctx context.Context, fields map[string]string) error
	// AuditAll appends records in order, in one round trip.
	AuditAll(ctx context.Context, records []map[string]string) error
}

// Tick looks at one due thread: it reminds approvers and escalates calls
// as their rules say (see reach.go), expires calls whose time is up,
// recovers a run cut off by a crash, applies decisions and shows answers
// and cards that a dead process left behind, and sets the thread's next
// wake-up.
func (s *Service) Tick(ctx context.Context, thread string) error {
	if !s.opts.Schedule {
		return nil
	}
	res, err := s.graph.State(ctx, thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return s.store.Forget(ctx, thread)
	}
	if err != nil {
		return err
	}
	if res.Status() == graph.Paused {
		if err := s.nudge(ctx, thread, res); err != nil {
			s.log.WithField("thread", thread).WithError(err).Warn("reminding approvers")
		}
		if _, err := s.ExpireDue(ctx, thread); err != nil {
			return err
		}
	}
	// Drive recovers a run cut off by a crash, applies decisions that a
	// process claimed but died before applying, and shows people what a
	// process died before showing.
	s.undelivered.Delete(thread)
	if err := s.Drive(ctx, thread); err != nil {
		return err
	}
	// Drive and ExpireDue have set the next wake-up if the thread still
	// needs one; make sure a thread whose run is still working (in
	// another process) is looked at again, and one whose delivery failed
	// just now (Slack did not answer) is tried again soon.
	if res, err = s.graph.State(ctx, thread); err == nil && s.opts.Schedule {
		at, waiting := s.planNext(res)
		if _, again := s.undelivered.LoadAndDelete(thread); again {
			if soon := s.opts.Now().Add(redeliverAfter); at.IsZero() || soon.Before(at) {
				at = soon
			}
		}
		s.writeSchedule(ctx, thread, at, waiting)
	}
	return nil
}

// RunSchedule ticks due threads every interval until ctx ends. While
// the schedule cannot be read (Redis is down) it logs the first failure,
// a reminder a minute, and the end of the outage (OutageLog).
func (s *Service) RunSchedule(ctx context.Context, interval time.Duration) {
	if !s.opts.Schedule {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	outage := &OutageLog{Log: s.log.WithField("loop", "schedule"), Now: s.opts.Now}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due, err := s.store.Due(ctx, s.opts.Now(), 100)
		if err != nil {
			if ctx.Err() == nil {
				outage.Failed("reading the schedule", err)
			}
			continue
		}
		outage.Answered()
		for _, thread := range due {
			if err := s.Tick(ctx, thread); err != nil {
				s.log.WithField("thread", thread).WithError(err).Warn("scheduled check")
			}
		}
	}
}

// OutageRemind is how often a loop that keeps failing to reach the store
// says that it still does.
const OutageRemind = time.Minute

// OutageLog logs the failures of a loop that polls the store (the
// schedule, the intake) as one outage rather than a line an attempt: the
// first failure is logged with its error, repeats only as a reminder
// every OutageRemind with how long the outage has lasted and how many
// attempts failed, and the first success after failures as one line
// that says how long the store was out. The loop's pace is its own: an
// OutageLog only decides what is logged. It is for one goroutine.
type OutageLog struct {
	// Log is where the lines go, with the loop's fields.
	Log logrus.FieldLogger
	// Now is the clock (default time.Now).
	Now func() time.Time

	since    time.Time // first failure of the outage; zero: none
	reminded time.Time // when the outage was last logged
	failed   int       // failed attempts of the outage
}

func (o *OutageLog) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// Failed records a failed attempt: what the loop was doing, and why it
// failed. It logs the first failure of an outage, and a reminder when
// the last line is OutageRemind old.
func (o *OutageLog) Failed(what string, err error) {
	now := o.now()
	o.failed++
	if o.since.IsZero() {
		o.since, o.reminded = now, now
		o.Log.WithError(err).Warn(what + " failed; retrying until Redis answers")
		return
	}
	if now.Sub(o.reminded) < OutageRemind {
		return
	}
	o.reminded = now
	o.Log.WithError(err).WithFields(logrus.Fields{
		"down_for": now.Sub(o.since).Round(time.Second).String(),
		"attempts": o.failed,
	}).Warn(what + " still fails")
}

// Answered records a successful attempt: after failures, it logs that
// the outage is over.
func (o *OutageLog) Answered() {
	if o.since.IsZero() {
		return
	}
	o.Log.WithFields(logrus.Fields{
		"down_for": o.now().Sub(o.since).Round(time.Second).String(),
		"attempts": o.failed,
	}).Info("Redis answers again")
	o.since, o.reminded, o.failed = time.Time{}, time.Time{}, 0
}

// planNext says when the thread must be looked at again (zero: never)
// and how many of its calls wait for a person, given where its run
// stands.
func (s *Service) planNext(res *graph.Result[agent.State]) (at time.Time, waiting int) {
	switch res.Status() {
	case graph.Paused:
		waiting = res.State.NumWaiting()
		now := s.opts.Now()
		for c := range res.State.AllWaiting() {
			if (c.Status == agent.Pending || c.Status == agent.Asking) && !c.Expires.IsZero() && (at.IsZero() || c.Expires.Before(at)) {
				at = c.Expires
			}
			if rule, ok := s.agent.Rule(c.Tool); ok {
				if t := nextNudge(c, rule, now); !t.IsZero() && (at.IsZero() || t.Before(at)) {
					at = t
				}
			}
		}
	case graph.Running:
		at = s.opts.Now().Add(2 * s.opts.LeaseTTL)
	case graph.Failed:
		if n, ok := s.retriesUnsent(res); ok {
			at = s.opts.Now().Add(unsentBackoff(n))
		}
	}
	return at, waiting
}

// A run that stopped before sending an approved call — the last check
// before the send (BeforeCall: the lease, the execution's audit entry)
// failed — has sent nothing: the call waits, approved, and the run is
// retried by the schedule, without anyone's click, after a backoff that
// doubles each time, up to maxUnsentRetries times in a row. Meanwhile
// the thread shows no failure; after the last retry it shows the run's
// error with its Retry button, as for any failed run.
const maxUnsentRetries = 5

// unsentBackoff is how long after its n-th unsent attempt in a row a
// run is retried.
func unsentBackoff(n int) time.Duration {
	return min(time.Second<<min(n-1, 6), time.Minute)
}

// retriesUnsent reports how many times in a row the failed run at res
// stopped before sending an approved call, and whether the schedule
// retries it on its own.
func (s *Service) retriesUnsent(res *graph.Result[agent.State]) (int, bool) {
	if res == nil || res.Status() != graph.Failed {
		return 0, false
	}
	for _, c := range res.State.Calls {
		if (c.Status == agent.Approved || c.Status == agent.Edited) && c.Unsent > 0 {
			return c.Unsent, s.opts.Schedule && c.Unsent <= maxUnsentRetries
		}
	}
	return 0, false
}

// audit records a decision.
func (s *Service) audit(ctx context.Context, thread string, c agent.Call, fields map[string]string) {
	if !s.opts.Audit {
		return
	}
	if err := s.store.Audit(ctx, s.auditRecord(thread, c, fields)); err != nil {
		s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key}).WithError(err).Warn("writing the audit record")
	}
}

// Audit records an event that is not a decision, such as a refused click.
func (s *Service) Audit(ctx context.Context, thread string, c agent.Call, fields map[string]string) {
	s.audit(ctx, thread, c, fields)
}
