package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/logtext"
)

// DecideAndDrive is Decide, then Drive, for a front end that answers the
// person once their decision is recorded and lets the run go on in the
// background: claimed is called once, as soon as the decision is
// recorded or refused, with the error Decide would have returned (nil:
// recorded); then the thread is driven, and DecideAndDrive returns
// Drive's error (or the decision's, which claimed had). claimed must not
// block; it is called before people are shown anything of the decision.
//
// In the common case it spares a round trip: when this process has the
// thread's state cached, the decision approves the only call that waits
// (one approval needed), and the store can (Sessions.ClaimsWithSaves),
// the decision is not claimed on its own but by the resumed run's first
// save — the save that marks the call running, before it is sent
// (SavedClaim). That save is fenced by a lease token that the same step
// takes, so it is made only if the claim is this decision's, the lease
// was free and the thread is still at the cached checkpoint; claimed is
// called as soon as it answers. People see the decision after that save,
// with the call's start: the CallStarted event's call carries its
// Decision, and no CallDecided comes before it, so that between the save
// and the call being sent there is no more to show than on any other
// resume (a card's update, then the lease check). When the claim is
// lost, nothing of the decision is written and claimed gets the
// *AlreadyDecidedError; when
// another process holds the lease, the claim is written (with its
// wake-up and audit entry) and that process applies it, as with Decide;
// when the cache is stale, nothing is written and the decision is
// checked again against the stored state, as Decide does. Everything
// else — several calls waiting, several approvals, edits, rejections,
// no cached state — takes Decide's path, then Drive's.
//
// Several processes may call it on one call at once: one decision wins,
// and its call runs once.
//
// When the claim's step was sent and its answer never came back (the link
// to the store down past every resend), the decision may or may not be
// recorded: claimed is called with an error that wraps ErrUnsettled, and
// called once more when DecideAndDrive has learnt what became of it by
// reading the claim back — nil, an *AlreadyDecidedError, or what Decide
// says when nothing was written — or with ErrUnsettled again if the
// store did not answer within settleFor. While what claimed was told is
// unsettled, it may be called again: its last call is the answer.
func (s *Service) DecideAndDrive(ctx context.Context, d Decision, claimed func(error)) error {
	var (
		mu              sync.Mutex
		told, unsettled bool
	)
	tell := func(err error) {
		mu.Lock()
		again := told && unsettled
		first := !told
		if first || again {
			told, unsettled = true, errors.Is(err, ErrUnsettled)
		}
		mu.Unlock()
		if first || again {
			claimed(err)
		}
	}
	err := s.decideAndDrive(ctx, d, tell)
	tell(err) // every path has told already; this is a guard
	return err
}

// ErrUnsettled: a decision's claim was sent to the store and its answer
// never came back; the claim may or may not have been written.
var ErrUnsettled = errors.New("what became of the decision's claim is not known yet")

// settleFor is how long a click whose claim's answer was lost keeps
// asking the store what became of the claim.
var settleFor = 2 * time.Minute

func (s *Service) decideAndDrive(ctx context.Context, d Decision, tell func(error)) error {
	if cached, ok := s.graph.Cached(d.Thread); ok && s.store.ClaimsWithSaves() {
		ck, err := s.checkAt(ctx, d, cached, false)
		if err != nil && final(err) {
			err = s.auditRefusal(ctx, d, ck.call, err)
			tell(err)
			return err
		}
		if err == nil && s.resumesAlone(d.Thread, cached, ck) {
			if done, err := s.claimWithSave(ctx, d.Thread, cached, ck, tell); done {
				return err
			}
			// The thread moved on since this process saw it: check the
			// decision against the stored state.
		}
	}
	err := s.Decide(ctx, d)
	tell(err)
	var uc *unsettledClaim
	if errors.As(err, &uc) {
		return s.settleClaim(ctx, d, uc, tell)
	}
	if err != nil {
		return err
	}
	return s.Drive(ctx, d.Thread)
}

// settleClaim learns what became of the decision d, whose claim (uc) the
// store did not answer, and tells it: its own claim is recorded, and the
// thread is driven (a lease the claim may have taken lapses, and the
// claim's wake-up carries it on); another's lost; nothing written, d is
// decided again.
func (s *Service) settleClaim(ctx context.Context, d Decision, uc *unsettledClaim, tell func(error)) error {
	s.log.WithFields(logrus.Fields{"thread": d.Thread, "call": uc.key}).WithError(uc).Warn("a decision's claim is not known to be recorded (its answer was lost, or replicas did not acknowledge it); reading the claim back")
	winner, found, err := s.readClaim(ctx, d.Thread, uc.key, uc.claimKey)
	switch {
	case err != nil:
		tell(uc)
		return uc
	case !found:
		err := s.Decide(ctx, d)
		tell(err)
		if err != nil {
			return err
		}
	case !bytes.Equal(winner, uc.raw):
		err := lostTo(uc.key, winner)
		tell(err)
		return err
	default:
		tell(nil)
	}
	return s.Drive(ctx, d.Thread)
}

// readClaim reads the claim claimKey of thread back, asking again until
// the store answers or settleFor has passed.
func (s *Service) readClaim(ctx context.Context, thread, key, claimKey string) (winner []byte, found bool, err error) {
	deadline := time.Now().Add(settleFor)
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		claims, err := s.store.ClaimValues(ctx, thread, []string{claimKey})
		if err == nil {
			winner, found = claims[claimKey]
			return winner, found, nil
		}
		if time.Now().Add(backoff).After(deadline) {
			s.log.WithFields(logrus.Fields{"thread": thread, "call": key}).WithError(err).Error("what became of a decision's claim could not be read back")
			return nil, false, err
		}
		select {
		case <-ctx.Done():
			return nil, false, errors.Join(err, context.Cause(ctx))
		case <-time.After(backoff):
		}
	}
}

// resumesAlone reports whether the checked decision ck lets the run at
// res go on by itself, so that the resumed run's first save is the one
// that marks its call running: it approves the only call that waits,
// which needs one approval, and this process has no session of the
// thread parked by an earlier claim.
func (s *Service) resumesAlone(thread string, res *graph.Result[agent.State], ck checked) bool {
	if res.Status() != graph.Paused || ck.claim.Kind != agent.Approve || ck.call == nil {
		return false
	}
	if s.graph.Compatible(res.Checkpoint) != nil {
		return false
	}
	n := 0
	for c := range res.State.AllWaiting() {
		n++
		if n > 1 || c.Key != ck.call.Key || c.Status != agent.Pending || c.Quorum() > 1 {
			return false
		}
	}
	s.openedMu.Lock()
	_, parked := s.opened[thread]
	s.openedMu.Unlock()
	return n == 1 && !parked
}

// claimWithSave resumes the run of thread (its key: a forked thread's
// state names the thread it was forked from) at cached with the checked
// decision ck, whose claim the run's first save carries (SavedClaim),
// and drives the thread on as Drive does. It reports done false, having
// told nothing and written nothing, when the thread was no longer at
// cached.
func (s *Service) claimWithSave(ctx context.Context, thread string, cached *graph.Result[agent.State], ck checked, tell func(error)) (done bool, err error) {
	c := *ck.call
	raw, err := decisionJSON(ck.claim)
	if err != nil {
		return false, nil
	}
	var wake time.Time
	if s.opts.Schedule {
		// As with a claim of its own: should this process die after the
		// save, another looks at the thread within a lease.
		wake = s.opts.Now().Add(s.opts.LeaseTTL)
	}
	var audit map[string]string
	if s.opts.Audit {
		audit = s.completeRecord(thread, c, decisionFields(ck.claim))
	}
	keys := neededKeys(cached)
	shown := s.takeRecords(thread)
	record, shownTo := recordsOf(shown)
	token := NewLeaseToken(s.opts.Owner)
	sc := &SavedClaim{Token: token, Claim: DecisionClaim{Thread: thread, Key: claimKey(c), Value: raw,
		ExpectHead: cached.Checkpoint.ID, WakeBy: wake, Audit: audit, LeaseOwner: s.opts.Owner, LeaseTTL: s.opts.LeaseTTL,
		Keys: keys, Record: record, Answered: shownTo}}
	ss := &session{thread: thread, token: token, head: cached.Checkpoint.ID, claims: map[string][]byte{},
		asked: make(map[string]bool, len(keys)), answered: -1, claim: sc}
	if ck.claim.By != "" {
		ss.decided = append(ss.decided, decisionRecord(thread, &cached.State, c, ck.claim))
	}
	ss.from = cached
	log := logtext.With(s.log, logrus.Fields{"thread": thread, "call": c.Key, "decision": ck.claim.Kind.String(), "by": ck.claim.By})
	won := func(r ClaimResult) {
		log.Info("decision claimed")
		var waited time.Duration
		if !c.Since.IsZero() && !ck.claim.At.IsZero() {
			waited = ck.claim.At.Sub(c.Since)
		}
		s.opts.Observer.Decided(ck.claim.Kind, waited)
		if r.AuditErr != nil {
			log.WithError(r.AuditErr).Warn("the decision is claimed; its audit entry could not be appended")
		}
	}
	sent := time.Now()
	// The run counts as one (logs, metrics) once its claim is ours and
	// its lease taken.
	var run logrus.FieldLogger = log
	// As soon as the save answers — before the call is sent — the person
	// is told.
	sc.onAnswer = func(r ClaimResult) {
		switch r.Outcome {
		case ClaimSaved, ClaimLeased:
			run = s.begin(thread, "resume", nil)
			ss.confirm(sent)
			for _, k := range keys {
				ss.asked[k] = true
			}
			for k, v := range r.Claims {
				ss.claims[k] = v
			}
			s.overlayRecords(ss)
			won(r)
			tell(nil)
		case ClaimBusy:
			won(r)
			tell(nil)
		case ClaimLost:
			if !bytes.Equal(r.Winner, raw) {
				tell(lostTo(c.Key, r.Winner))
			}
		}
	}
	runCtx, stop := s.keepLease(ctx, ss)
	out, err := s.graph.ResumeAt(WithSavedClaim(s.endWithSave(runCtx, ss), sc), thread, cached.Checkpoint.ID,
		s.agent.DecideOne(c.Key, ck.claim))
	r, answered := sc.Answered()
	switch {
	case answered && r.Outcome == ClaimSaved:
		s.after(runCtx, run, ss, out, err)
		stop()
		return true, s.driveOn(ctx, ss, runCtx, !errors.Is(err, graph.ErrIncompatible), nil)
	case answered && r.Outcome == ClaimStale:
		stop()
		s.returnRecords(thread, shown)
		return false, nil
	case answered && r.Outcome == ClaimBusy:
		stop()
		return true, nil
	case answered && r.Outcome == ClaimLost && !bytes.Equal(r.Winner, raw):
		stop()
		return true, lostTo(c.Key, r.Winner)
	case !answered && !sc.WasLost() && errors.Is(err, graph.ErrConflict):
		// The thread moved on before the claim was sent: another
		// decision's run in this process saved first, and the graph
		// found its cache no longer at cached. Nothing was written: as
		// with ClaimStale, the decision is checked against the stored
		// state, where the winner's claim is. The lease, which the
		// claim's step takes, was not taken.
		stop()
		s.returnRecords(thread, shown)
		return false, nil
	case answered && r.Outcome == ClaimLeased:
		// The claim is ours and so is the lease, but the save was
		// refused: go on from the stored state, as Drive does.
		run.Info("the run goes on from the stored state")
		ss.res, ss.from, ss.decided = nil, nil, nil // the step applies the claim anew
		worked, err := s.step(runCtx, ss)
		stop()
		return true, s.driveOn(ctx, ss, runCtx, worked, err)
	}
	// The store did not say what became of the claim (an error), or
	// said that it is this decision's own, written by an attempt whose
	// answer was lost and which did not save (a save it made answers
	// its resend as it did: ClaimSaved). The step may have taken the
	// lease. Let go of what this attempt may hold and drive the thread
	// from what is stored: a claim there is applied, a call saved
	// running is recovered as after a crash.
	stop()
	if !answered && sc.WasLost() {
		// The step was sent and may have run: the claim and the lease
		// are this decision's, or nothing was written. The person is
		// told so at once, then what became of it.
		s.returnRecords(thread, shown)
		err = fmt.Errorf("claim decision on %s: %w: %w", c.Key, ErrUnsettled, err)
		run.WithError(err).Warn("the answer to the decision's claim with the run's save was lost; reading the claim back")
		tell(err)
		decided := c
		decided.Decision = &ck.claim
		shownDecided := func() {
			// The card shows the decision before the drive recovers
			// the call: the save that would have shown it with the
			// call's start did not answer.
			_ = s.report(ctx, Event{Kind: CallDecided, Thread: thread, State: &cached.State, Call: &decided})
		}
		return s.settle(ctx, thread, token, c.Key, claimKey(c), raw, err, tell, shownDecided)
	}
	s.release(thread, token)
	if !answered {
		s.returnRecords(thread, shown) // written twice at worst: they are set once
		if err == nil {
			err = errors.New("the store did not write the claim with the save")
		}
		err = fmt.Errorf("claim decision on %s: %w", c.Key, err)
		run.WithError(err).Warn("the decision's claim with the run's save did not answer; the thread is driven from what is stored")
		tell(err)
		if derr := s.Drive(ctx, thread); derr != nil {
			s.log.WithField("thread", thread).WithError(derr).Warn("driving the thread after a claim that did not answer")
		}
		return true, err
	}
	tell(nil)
	return true, s.Drive(ctx, thread)
}

// settle learns what became of a decision whose claim's step (claimKey,
// value raw, lease token) was sent and not answered, by reading the claim
// back once the store answers, and tells it: the decision's own claim is
// recorded, and the thread is driven from what is stored (a call saved
// running is recovered as after a crash); another's lost; no claim at
// all was not written, and reports done false for the decision to be
// made again, as Decide makes it. unsettled is told again, and
// returned, if the store does not answer within settleFor. show shows
// people the decision, when it is recorded.
func (s *Service) settle(ctx context.Context, thread, token, key, claimKey string, raw []byte, unsettled error, tell func(error), show func()) (done bool, err error) {
	log := s.log.WithFields(logrus.Fields{"thread": thread, "call": key})
	winner, found, err := s.readClaim(ctx, thread, key, claimKey)
	if err != nil {
		tell(unsettled)
		return true, unsettled
	}
	// The step took the lease with token if it ran and found it free:
	// let go of it, for the drive below or another process.
	s.release(thread, token)
	switch {
	case !found:
		log.Info("the decision's claim was not written; deciding again")
		return false, nil
	case !bytes.Equal(winner, raw):
		err := lostTo(key, winner)
		tell(err)
		return true, err
	}
	log.Info("decision claimed")
	tell(nil)
	show()
	return true, s.Drive(ctx, thread)
}

// lostTo is the answer to a decision whose claim on key another held,
// with value winner.
func lostTo(key string, winner []byte) error {
	first, err := decodeClaim(winner)
	if err != nil {
		return fmt.Errorf("claim decision on %s: %w", key, err)
	}
	return &AlreadyDecidedError{Key: key, Decision: first}
}

// claimPending reports whether the session's lease is still to be taken
// by the save that carries its claim: it is not renewed meanwhile, and
// no call may be sent under it.
func (ss *session) claimPending() bool {
	if ss.claim == nil {
		return false
	}
	r, answered := ss.claim.Answered()
	return !answered || (r.Outcome != ClaimSaved && r.Outcome != ClaimLeased)
}

// showCutOff shows, on their cards, the decisions of the calls st holds
// running: a run cut off by a crash is recovered, and the process that
// claimed a call's decision with the save that marked it running may
// have died before the card showed the decision. Its buttons would stay,
// for a round that is over; the recovered run asks again, if it must, on
// a card of the next round.
func (s *Service) showCutOff(ctx context.Context, thread string, st *agent.State) {
	for _, c := range st.Calls {
		if c.Status != agent.Running || c.Decision == nil || !c.NeedsApproval || c.Attempts == 0 {
			continue
		}
		c.Attempts-- // the round the decision was made in
		c.Status = agent.Approved
		if c.Decision.Kind == agent.Edit {
			c.Status = agent.Edited
		}
		_ = s.report(ctx, Event{Kind: CallDecided, Thread: thread, State: st, Call: &c})
	}
}
