package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
)

// Leases: one process runs a thread at a time. A run holds the thread's
// lease, renews it while it works, is fenced by it at every save, and
// stops as soon as it finds it lost.

// withLease runs fn holding the thread's lease, then drives the thread in
// case decisions arrived meanwhile. ErrBusy if another process holds it.
func (s *Service) withLease(ctx context.Context, thread string, fn func(context.Context, *session) error) error {
	return s.withLeaseWithin(ctx, thread, s.opts.BusyWait, fn)
}

// withLeaseWithin is withLease that waits up to wait for the lease before
// calling the thread busy.
func (s *Service) withLeaseWithin(ctx context.Context, thread string, wait time.Duration, fn func(context.Context, *session) error) error {
	// The lease is often held for a moment only — the run that just
	// answered is letting go — so wait a little before calling it busy.
	ss, held, err := s.open(ctx, thread)
	for deadline := s.opts.Now().Add(wait); err == nil && !held && s.opts.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
		ss, held, err = s.open(ctx, thread)
	}
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%s: %w", thread, ErrBusy)
	}
	runCtx, stop := s.keepLease(ctx, ss)
	err = fn(runCtx, ss)
	stop()
	claims := s.close(ss)
	if err != nil {
		return err
	}
	if !s.decidedMeanwhile(ss, claims) {
		return nil
	}
	return s.Drive(ctx, thread)
}

// NewLeaseToken returns the token of one acquisition of a lease by
// owner: owner, a colon and 128 random bits in hex. The owner stays
// readable, so that a lease still says which process holds it; the
// random part makes it the acquisition's own. Stores that keep leases
// give every acquisition a new one.
func NewLeaseToken(owner string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	var digits [2 * len(b)]byte
	hex.Encode(digits[:], b[:])
	return owner + ":" + string(digits[:]) // one allocation: the token
}

// release gives up the lease of the acquisition that token names.
func (s *Service) release(thread, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.store.ReleaseLease(ctx, thread, token); err != nil {
		s.log.WithField("thread", thread).WithError(err).Warn("releasing lease")
	}
}

// keepLease renews the session's lease until the returned stop is
// called, and returns the context the run works in: its saves are fenced
// by the session's token (graph.WithFence), and it is cancelled, with
// cause ErrLeaseLost, as soon as a renewal finds the lease gone — a run
// that stalled past its lease stops instead of working on beside the
// next holder.
//
// The renewals run on a timer every third of the lease (see renewer),
// not on a goroutine of the session's: most sessions end before the
// first one is due, and then cost no goroutine at all.
func (s *Service) keepLease(ctx context.Context, ss *session) (runCtx context.Context, stop func()) {
	runCtx, cancelRun := context.WithCancelCause(context.WithValue(graph.WithFence(ctx, ss.token), sessionKey{}, ss))
	r := &renewer{s: s, ss: ss, ctx: ctx, lost: cancelRun, every: s.opts.LeaseTTL / 3}
	r.start()
	return runCtx, func() { r.stop(); cancelRun(nil) }
}

// renewer renews a session's lease every period, as a time.Ticker would
// tick (a renewal that overruns skips the ticks it missed), on the
// timer's own goroutine, until it is stopped, the run's last save let go
// of the lease, or a renewal finds the lease gone (then it calls lost).
type renewer struct {
	s     *Service
	ss    *session
	ctx   context.Context // the run's: renewals take its values, not its cancellation
	lost  context.CancelCauseFunc
	every time.Duration

	mu      sync.Mutex
	stopped bool
	next    time.Time          // when the next renewal is due
	t       *time.Timer        // fires renew at next
	cancel  context.CancelFunc // of the renewal in flight, if any
	running sync.WaitGroup     // the renewal in flight
}

func (r *renewer) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next = time.Now().Add(r.every)
	r.t = time.AfterFunc(r.every, r.renew)
}

// stop ends the renewals: one in flight is cancelled and waited for.
func (r *renewer) stop() {
	r.mu.Lock()
	r.stopped = true
	r.t.Stop()
	if r.cancel != nil {
		r.cancel()
	}
	r.mu.Unlock()
	r.running.Wait()
}

// renew is one tick: it renews the lease and sets the timer for the
// next, unless the renewals are over.
func (r *renewer) renew() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	// Made here, not at the start: most sessions end before the first
	// renewal.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.ctx))
	r.cancel = cancel
	r.running.Add(1)
	r.mu.Unlock()
	defer r.running.Done()
	defer cancel()
	if !r.renewOnce(ctx) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancel = nil
	if r.stopped {
		return
	}
	now := time.Now()
	for !r.next.After(now) {
		r.next = r.next.Add(r.every)
	}
	r.t.Reset(r.next.Sub(now))
}

// renewOnce renews the lease and reports whether to go on renewing it.
func (r *renewer) renewOnce(ctx context.Context) bool {
	s, ss := r.s, r.ss
	if ss.ended() {
		return false // let go with the run's last save
	}
	if ss.unleased() || ss.claimPending() {
		return true // the run's first save takes it (a start's, or a click's: DecideAndDrive)
	}
	sent := time.Now()
	ok, err := s.store.RenewLease(ctx, ss.thread, ss.token, s.opts.LeaseTTL)
	if err == nil && !ok && ss.ended() {
		return false
	}
	if err == nil && !ok {
		s.log.WithField("thread", ss.thread).Warn("lost the thread's lease while running; stopping the run")
		r.lost(ErrLeaseLost)
		return false
	}
	if err == nil {
		ss.confirm(sent)
	}
	return true
}

// runThread is the thread of the run ctx belongs to, as its session
// names it: a forked thread's state still names the thread it was forked
// from.
func runThread(ctx context.Context, st *agent.State) string {
	if ss, ok := ctx.Value(sessionKey{}).(*session); ok {
		return ss.thread
	}
	return st.Thread
}

// BeforeCall is the agent's hook before a call is sent: runner.New
// makes it the agent's (agent.Runner). It confirms that the run's acquisition of
// the thread's lease still holds, and fails with ErrLeaseLost if not, so
// that the call is not sent; then it writes the call's execution to the
// audit trail, unless the save that marked the call running did
// (RunningSave), and fails if it cannot, so that no call runs unrecorded.
func (s *Service) BeforeCall(ctx context.Context, st *agent.State, c agent.Call) error {
	if err := s.confirmLease(ctx, st, c); err != nil {
		if s.opts.Audit && savedExecution(ctx) {
			// The save that marked it running wrote its execution:
			// the trail says it was not sent after all.
			s.auditOutcome(ctx, st, c, "unsent", map[string]string{"reason": "the lease was lost before the call was sent"})
		}
		return err
	}
	return s.auditExecution(ctx, st, c)
}

// confirmLease fails with ErrLeaseLost unless the session the run
// belongs to still holds the thread's lease: the acquisition it began
// with, not merely this process, so that a run that stalled past its
// lease is stopped even when its own process took the lease again since.
// A run without a session holds no lease and sends nothing.
func (s *Service) confirmLease(ctx context.Context, st *agent.State, c agent.Call) error {
	thread := runThread(ctx, st)
	ss, _ := ctx.Value(sessionKey{}).(*session)
	if ss == nil || ss.token == "" {
		return fmt.Errorf("call %s outside a run of the service: %w", c.Key, ErrLeaseLost)
	}
	if ss.claimPending() || ss.unleased() {
		// The save that was to take the lease (a click's, with its
		// claim: DecideAndDrive; a start's first) did not: the run
		// holds nothing.
		return fmt.Errorf("call %s before its run's first save took the lease: %w", c.Key, ErrLeaseLost)
	}
	// A lease confirmed by a request sent less than a third of its
	// duration ago cannot have lapsed: nobody else can hold it, so the
	// round trip is spared. (Measured on this process's monotonic
	// clock; Redis counts the lease from when it received the request,
	// later.)
	if time.Since(ss.lastConfirmed()) < s.opts.LeaseTTL/3 {
		return nil
	}
	sent := time.Now()
	ok, err := s.store.RenewLease(ctx, thread, ss.token, s.opts.LeaseTTL)
	if err != nil {
		return fmt.Errorf("confirm the lease before call %s: %w", c.Key, err)
	}
	if !ok {
		s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key}).Warn("lost the thread's lease; the call is not sent")
		return fmt.Errorf("call %s: %w", c.Key, ErrLeaseLost)
	}
	ss.confirm(sent)
	return nil
}
