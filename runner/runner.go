// Package runner is the conversation service: it maps a thread to an agent
// run and starts, continues, resumes and recovers runs, applying people's
// decisions exactly once. It is independent of Slack: each front end (the
// Slack handlers, the terminal chat, the playground) implements Reporter
// to show what happens, and calls the Service when people act.
//
// Decide is the one door for people's decisions, whatever the front end:
// it owns every rule about them (see Decide), so front ends only show the
// typed errors it returns. An approval is bound to the hash of the exact
// arguments the person was shown, and the agent runs a call only if what
// it is about to run has that hash. A thread reply is feedback from
// someone allowed to decide (it rejects the calls they may decide), or a
// note for the model from anyone else.
//
// Decisions are claimed before they are applied. A claim is a set-once
// record in the store, so when two people (or two replicas, or a click
// and an expiry) decide one call at once, exactly one wins and the other
// learns who did. Applying claimed decisions is idempotent, so a process
// that dies between the claim and the resume loses nothing: the next
// drive of the thread applies it.
//
// Runs of one thread never overlap: a run holds the thread's lease, which
// it renews while it works. A process that cannot get the lease leaves the
// work to the holder, which looks for new claims after it lets go.
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/interrupt"
)

// Claims is a set-once record per thread and key.
type Claims interface {
	// Claim stores value under key unless a value is there already. It
	// returns the stored value and whether it was this call's.
	Claim(ctx context.Context, thread, key string, value []byte) (winner []byte, won bool, err error)
	// Claims returns every claim of the thread.
	Claims(ctx context.Context, thread string) (map[string][]byte, error)
}

// Leases keep two processes from running one thread at once.
type Leases interface {
	AcquireLease(ctx context.Context, thread, owner string, ttl time.Duration) (bool, error)
	RenewLease(ctx context.Context, thread, owner string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, thread, owner string) error
}

// Store is what the runner needs from storage besides the graph's store.
type Store interface {
	Claims
	Leases
}

// Errors of the service. Match them with errors.Is or errors.As.
var (
	// ErrBusy: the thread's run is working; try again when it answers.
	ErrBusy = errors.New("the agent is still working on this thread")
	// ErrFailed: the thread's last run failed; Retry it first.
	ErrFailed = errors.New("the last run in this thread failed")
	// ErrNotFailed: Retry was asked of a thread whose run has not failed.
	ErrNotFailed = errors.New("the run has not failed")
	// ErrLeaseLost: this process no longer holds the thread's lease
	// (it stalled past it); another process carries the run on.
	ErrLeaseLost = errors.New("lost the thread's lease")
)

// AlreadyDecidedError is the answer to a decision that lost: the call was
// decided already, by Decision.By.
type AlreadyDecidedError struct {
	Key      string
	Decision interrupt.Decision
}

func (e *AlreadyDecidedError) Error() string {
	if e.Decision.Kind == interrupt.Expire {
		return fmt.Sprintf("call %s already expired", e.Key)
	}
	return fmt.Sprintf("call %s already %s by %s", e.Key, e.Decision.Kind.Past(), e.Decision.By)
}

// Options are the service's optional settings.
type Options struct {
	// LeaseTTL is how long a lease lasts without renewal (default 10s;
	// it is renewed every third of that): a crashed process's threads are
	// picked up by another soon after it lapses.
	LeaseTTL time.Duration
	// BusyWait is how long a reply or a retry waits for another run of
	// the thread to let go before it is refused with ErrBusy (default 5s).
	BusyWait time.Duration
	// Owner names this process in leases (default random).
	Owner string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger defaults to a logger that discards.
	Logger logrus.FieldLogger
	// Schedule, if set, keeps wake-ups for expiry and crash recovery.
	Schedule Schedule
	// Auditor, if set, records every decision.
	Auditor Auditor
	// Observer, if set, is told what happens, for metrics.
	Observer Observer
	// Groups, if set, answers for approver lists that name user groups;
	// without it a group approver matches nobody.
	Groups Groups
}

// Service runs conversations.
type Service struct {
	agent *agent.Agent
	graph *graph.Graph[agent.State]
	store Store
	rep   Reporter
	opts  Options
	log   logrus.FieldLogger

	// opened holds sessions that a decision's claim began, by thread,
	// for the drive that follows.
	openedMu sync.Mutex
	opened   map[string]*session
}

// New returns a service that runs a's graph, keeps claims and leases in
// store and reports to rep.
func New(a *agent.Agent, store Store, rep Reporter, opts Options) *Service {
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 10 * time.Second
	}
	if opts.BusyWait <= 0 {
		opts.BusyWait = 5 * time.Second
	}
	if opts.Owner == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		opts.Owner = hex.EncodeToString(b[:])
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.Out = io.Discard
		opts.Logger = l
	}
	if opts.Observer == nil {
		opts.Observer = noObserver{}
	}
	return &Service{agent: a, graph: a.Graph(), store: store, rep: rep, opts: opts, log: opts.Logger}
}

// StartRequest is a person's request that begins a conversation.
type StartRequest struct {
	// Thread is the conversation's key (for Slack: team, channel and the
	// root message's ts).
	Thread    string
	Requester string
	Team      string
	Channel   string
	Text      string
}

// Start begins a conversation in a new thread and runs it until it
// finishes or pauses. It fails with ErrThreadExists if the thread has
// one already (a retried delivery).
func (s *Service) Start(ctx context.Context, req StartRequest) error {
	ss, held, err := s.open(ctx, req.Thread)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("start %s: %w", req.Thread, ErrBusy)
	}
	runCtx, stop := s.keepLease(ctx, ss)
	run := s.begin(req.Thread, "start").WithField("requester", req.Requester)
	init := agent.NewState(req.Thread, req.Requester, req.Channel, req.Text)
	init.Team = req.Team
	res, err := s.graph.Start(runCtx, req.Thread, init, graph.RunConfig{})
	ss.asked[answeredKey] = true // a new thread: nothing was delivered
	if errors.Is(err, graph.ErrThreadExists) {
		stop()
		s.close(ss)
		return fmt.Errorf("start %s: %w", req.Thread, ErrThreadExists)
	}
	s.after(runCtx, run, ss, res, err)
	stop()
	if !s.decidedMeanwhile(ss, s.close(ss)) {
		return nil
	}
	// A decision made while the cards were being posted was left to us.
	return s.Drive(ctx, req.Thread)
}

// State returns the thread's latest checkpoint and conversation;
// ErrNoThread if it has none.
func (s *Service) State(ctx context.Context, thread string) (*graph.Result[agent.State], error) {
	res, err := s.graph.State(ctx, thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return nil, fmt.Errorf("%s: %w", thread, ErrNoThread)
	}
	return res, err
}

// Agent returns the agent the service runs.
func (s *Service) Agent() *agent.Agent { return s.agent }

// Call returns the thread's current call with key, to show it (a card's
// "Show all"); ErrNotPending if there is none.
func (s *Service) Call(ctx context.Context, thread, key string) (*agent.Call, error) {
	res, err := s.graph.State(ctx, thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return nil, ErrNotPending
	}
	if err != nil {
		return nil, err
	}
	c, ok := res.State.Call(key)
	if !ok {
		return nil, ErrNotPending
	}
	return c, nil
}

// ExpireDue expires the thread's pending calls whose deadline has passed
// and drives the run on. It reports how many calls it expired.
func (s *Service) ExpireDue(ctx context.Context, thread string) (int, error) {
	res, err := s.graph.State(ctx, thread)
	if err != nil {
		return 0, err
	}
	now := s.opts.Now()
	d := interrupt.Decision{Kind: interrupt.Expire, At: now}
	n := 0
	for _, c := range res.State.Waiting() {
		if c.Status != agent.Pending || c.Expires.IsZero() || now.Before(c.Expires) {
			continue
		}
		err := s.claim(ctx, thread, c, d, "")
		var lost *AlreadyDecidedError
		if errors.As(err, &lost) {
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return n, s.Drive(ctx, thread)
}

// Drive does whatever the thread's run can do now: apply claimed
// decisions to a paused run and resume it, or recover a run cut off by a
// crash. If another process holds the thread, Drive leaves the work to it
// and returns nil; should that process have died, the thread is looked at
// again once its lease lapses.
func (s *Service) Drive(ctx context.Context, thread string) error {
	for {
		ss, held, err := s.open(ctx, thread)
		if err != nil {
			return err
		}
		if !held {
			return nil
		}
		runCtx, stop := s.keepLease(ctx, ss)
		worked, err := s.step(runCtx, ss)
		stop()
		claims := s.close(ss)
		if err != nil || !worked {
			return err
		}
		// Work was done. Claims made while we held the lease were left
		// to us: go on if there are any.
		if ss.res != nil && !s.decidedMeanwhile(ss, claims) {
			return nil
		}
	}
}

// decidedMeanwhile reports whether claims (read as the session let go)
// hold a decision on a call that waits at the session's last result.
func (s *Service) decidedMeanwhile(ss *session, claims map[string][]byte) bool {
	if ss.res == nil || ss.res.Status() != graph.Paused {
		return ss.res == nil
	}
	for _, c := range ss.res.State.Waiting() {
		if _, ok := claims[claimKey(c)]; ok {
			return true
		}
	}
	return false
}

// step does one piece of work on a thread whose lease is held, and
// reports whether there was any.
func (s *Service) step(ctx context.Context, ss *session) (bool, error) {
	thread := ss.thread
	res, err := s.stateIn(ctx, ss)
	if err != nil {
		return false, err
	}
	switch res.Status() {
	case graph.Running:
		run := s.begin(thread, "recover")
		run.Warn("recovering a run cut off by a crash")
		out, err := s.graph.Recover(ctx, thread)
		s.after(ctx, run, ss, out, err)
		return !errors.Is(err, graph.ErrIncompatible), nil
	case graph.Paused:
		if s.graphChanged(ctx, s.log.WithField("thread", thread), thread, s.graph.Compatible(res.Checkpoint)) {
			return false, nil
		}
		decisions, err := s.claimed(ss, &res.State)
		if err != nil {
			return false, err
		}
		if len(decisions) == 0 {
			s.deliver(ctx, s.log.WithField("thread", thread), ss, res)
			return false, nil
		}
		// People see each decision as it is applied: here, in the work
		// after the click, not in the click's acknowledgement.
		for _, key := range slices.Sorted(maps.Keys(decisions)) {
			c, _ := res.State.Call(key)
			decided, d := *c, decisions[key]
			decided.Decision = &d
			_ = s.report(ctx, Event{Kind: CallDecided, Thread: thread, State: &res.State, Call: &decided})
		}
		run := s.begin(thread, "resume")
		out, err := s.graph.ResumeAt(ctx, thread, res.Checkpoint.ID, s.agent.Decide(decisions))
		if errors.Is(err, graph.ErrConflict) {
			run.Info("another process resumed the thread first")
			ss.res = nil
			return true, nil // look again
		}
		s.after(ctx, run, ss, out, err)
		return !errors.Is(err, graph.ErrIncompatible), nil
	default:
		// Nothing to run: make sure people have seen what the thread
		// holds (a process may have died before showing it).
		s.deliver(ctx, s.log.WithField("thread", thread), ss, res)
		return false, nil
	}
}

// claimed returns the claimed decisions for calls that still wait.
func (s *Service) claimed(ss *session, st *agent.State) (map[string]interrupt.Decision, error) {
	out := map[string]interrupt.Decision{}
	for _, c := range st.Waiting() {
		raw, ok := ss.claims[claimKey(c)]
		if !ok {
			continue
		}
		var d interrupt.Decision
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("claim on %s: %w", c.Key, err)
		}
		if err := s.agent.CheckDecision(st, c.Key, d); err != nil {
			s.log.WithFields(logrus.Fields{"thread": ss.thread, "call": c.Key}).WithError(err).Warn("claimed decision does not apply; ignoring it")
			continue
		}
		out[c.Key] = d
	}
	return out, nil
}

// claim records d as the decision on call c, or returns who won.
func (s *Service) claim(ctx context.Context, thread string, c agent.Call, d interrupt.Decision, expectHead string) error {
	key := c.Key
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	// The thread is woken before the claim is written: should this
	// process die before applying the decision, another applies it
	// within a lease, whatever the thread's next wake-up was.
	var wake time.Time
	if s.opts.Schedule != nil {
		wake = s.opts.Now().Add(s.opts.LeaseTTL)
	}
	var winner []byte
	var won bool
	if sess, ok := s.store.(Sessions); ok {
		var audit map[string]string
		if s.opts.Auditor != nil {
			audit = s.auditRecord(thread, c, decisionFields(d))
		}
		// The claim also takes the lease, if it is free, for the drive
		// that applies the decision; should that drive not come, the
		// lease lapses and the wake-up written here carries it on.
		var keys []string
		if cached, ok := s.graph.Cached(thread); ok {
			keys = neededKeys(cached)
		}
		sent := time.Now()
		var got Claimed
		got, err = sess.ClaimDecision(ctx, DecisionClaim{Thread: thread, Key: claimKey(c), Value: raw,
			ExpectHead: expectHead, WakeBy: wake, Audit: audit,
			LeaseOwner: s.opts.Owner, LeaseTTL: s.opts.LeaseTTL, Keys: keys})
		winner, won = got.Winner, got.Won
		if err == nil && got.Leased {
			ss := &session{thread: thread, head: got.Head, claims: got.Claims, asked: map[string]bool{}, answered: -1}
			for _, k := range keys {
				ss.asked[k] = true
			}
			ss.confirm(sent)
			s.keepOpened(ss)
		}
	} else {
		if !wake.IsZero() {
			if err := s.opts.Schedule.WakeBy(ctx, thread, wake); err != nil {
				return fmt.Errorf("claim decision on %s: %w", key, err)
			}
		}
		winner, won, err = s.store.Claim(ctx, thread, claimKey(c), raw)
		if err == nil && won {
			s.audit(ctx, thread, c, decisionFields(d))
		}
	}
	if err != nil {
		return fmt.Errorf("claim decision on %s: %w", key, err)
	}
	if won {
		s.log.WithFields(logrus.Fields{"thread": thread, "call": key, "decision": d.Kind.String(), "by": d.By}).Info("decision claimed")
		var waited time.Duration
		if !c.Since.IsZero() && !d.At.IsZero() {
			waited = d.At.Sub(c.Since)
		}
		s.opts.Observer.Decided(d.Kind, waited)
		return nil
	}
	var first interrupt.Decision
	if err := json.Unmarshal(winner, &first); err != nil {
		return fmt.Errorf("claim decision on %s: %w", key, err)
	}
	return &AlreadyDecidedError{Key: key, Decision: first}
}

// decisionFields describes a decision for the audit record.
func decisionFields(d interrupt.Decision) map[string]string {
	f := map[string]string{"decision": d.Kind.String(), "by": d.By, "at": d.At.UTC().Format(time.RFC3339Nano)}
	if d.Hash != "" {
		f["hash"] = d.Hash
	}
	if len(d.Args) > 0 {
		f["edited_args"] = string(d.Args)
	}
	if d.Reason != "" {
		f["reason"] = d.Reason
	}
	return f
}

// wakeBy makes sure the thread is looked at no later than at, if the
// service keeps a schedule.
func (s *Service) wakeBy(ctx context.Context, thread string, at time.Time) {
	if s.opts.Schedule == nil {
		return
	}
	if err := s.opts.Schedule.WakeBy(ctx, thread, at); err != nil {
		s.log.WithField("thread", thread).WithError(err).Warn("updating the schedule")
	}
}

// claimKey names the decision on a call in its current round. A call
// waits for a decision once, or again after a crash cut off its run
// (outcome unknown); the earlier round's decision must not answer the
// later one, so the key counts the call's attempts.
func claimKey(c agent.Call) string { return fmt.Sprintf("decision:%s#%d", c.Key, c.Attempts) }

// withLease runs fn holding the thread's lease, then drives the thread in
// case decisions arrived meanwhile. ErrBusy if another process holds it.
func (s *Service) withLease(ctx context.Context, thread string, fn func(context.Context, *session) error) error {
	// The lease is often held for a moment only — the run that just
	// answered is letting go — so wait a little before calling it busy.
	ss, held, err := s.open(ctx, thread)
	for deadline := s.opts.Now().Add(s.opts.BusyWait); err == nil && !held && s.opts.Now().Before(deadline); {
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

func (s *Service) acquire(ctx context.Context, thread string) (bool, error) {
	ok, err := s.store.AcquireLease(ctx, thread, s.opts.Owner, s.opts.LeaseTTL)
	if err != nil {
		return false, fmt.Errorf("lease %s: %w", thread, err)
	}
	return ok, nil
}

func (s *Service) release(thread string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.store.ReleaseLease(ctx, thread, s.opts.Owner); err != nil {
		s.log.WithField("thread", thread).WithError(err).Warn("releasing lease")
	}
}

// keepLease renews the thread's lease until the returned stop is called,
// and returns the context the run works in: its saves are fenced by the
// lease (graph.WithFence), and it is cancelled, with cause ErrLeaseLost,
// as soon as a renewal finds the lease gone — a process that stalled
// past its lease stops instead of working on beside the next holder.
func (s *Service) keepLease(ctx context.Context, ss *session) (runCtx context.Context, stop func()) {
	thread := ss.thread
	runCtx, cancelRun := context.WithCancelCause(context.WithValue(graph.WithFence(ctx, s.opts.Owner), sessionKey{}, ss))
	renewCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(s.opts.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-t.C:
				sent := time.Now()
				ok, err := s.store.RenewLease(renewCtx, thread, s.opts.Owner, s.opts.LeaseTTL)
				if err == nil && !ok {
					s.log.WithField("thread", thread).Warn("lost the thread's lease while running; stopping the run")
					cancelRun(ErrLeaseLost)
					return
				}
				if err == nil {
					ss.confirm(sent)
				}
			}
		}
	}()
	return runCtx, func() { cancel(); wg.Wait(); cancelRun(nil) }
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

// BeforeCall is the agent's hook before a call is sent: pass it as
// agent.Options.BeforeCall. It confirms that this
// process still holds the thread's lease, and fails with ErrLeaseLost if
// not, so that the call is not sent.
func (s *Service) BeforeCall(ctx context.Context, st *agent.State, c agent.Call) error {
	thread := runThread(ctx, st)
	ss, _ := ctx.Value(sessionKey{}).(*session)
	if ss != nil {
		// A lease confirmed by a request sent less than a third of its
		// duration ago cannot have lapsed: nobody else can hold it, so
		// the round trip is spared. (Measured on this process's
		// monotonic clock; Redis counts the lease from when it received
		// the request, later.)
		if time.Since(ss.lastConfirmed()) < s.opts.LeaseTTL/3 {
			return nil
		}
	}
	sent := time.Now()
	ok, err := s.store.RenewLease(ctx, thread, s.opts.Owner, s.opts.LeaseTTL)
	if err != nil {
		return fmt.Errorf("confirm the lease before call %s: %w", c.Key, err)
	}
	if !ok {
		s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key}).Warn("lost the thread's lease; the call is not sent")
		return fmt.Errorf("call %s: %w", c.Key, ErrLeaseLost)
	}
	if ss != nil {
		ss.confirm(sent)
	}
	return nil
}

// begin counts a run that starts or resumes and returns its logger,
// with the thread and an ID of its own so that its lines can be told
// from those of the thread's other runs.
func (s *Service) begin(thread, how string) logrus.FieldLogger {
	s.opts.Observer.RunStarted(how != "start" && how != "continue")
	var b [6]byte
	_, _ = rand.Read(b[:])
	log := s.log.WithFields(logrus.Fields{"thread": thread, "run": hex.EncodeToString(b[:])})
	log.WithField("how", how).Info("run started")
	return log
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
	log = log.WithField("checkpoint", res.Checkpoint.ID)
	switch res.Status() {
	case graph.Paused:
		log.WithField("waiting", len(res.State.Waiting())).Info("run paused for approval")
	case graph.Failed:
		log.WithError(err).Error("run failed")
	case graph.Done:
		log.Info("run finished")
	}
	// What to deliver is judged by the claims read when the session
	// began: records of deliveries are written only under the lease, and
	// the calls this run made wait in a round of their own, which nobody
	// can have been shown yet.
	if !s.deliver(ctx, log, ss, res) {
		// Slack (or whatever shows events) failed; try again shortly.
		ss.redeliver = true
	}
	ss.schedule = true
	ss.wake, ss.waiting = s.planNext(res)
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
		if err := s.report(ctx, Event{Kind: Answer, Thread: thread, State: st, Text: st.Messages[i].Content, Message: i}); err != nil {
			answered, ok = i, false
			break
		}
		if _, isSessions := s.store.(Sessions); !isSessions {
			key := fmt.Sprintf("answered:%d", i) // recorded one by one
			ss.claims[key] = []byte("1")
			ss.record = append(ss.record, key)
		}
	}
	if _, isSessions := s.store.(Sessions); isSessions {
		ss.answered = max(ss.answered, answered)
		ss.claims[answeredKey] = []byte(strconv.Itoa(answered))
	}
	switch res.Status() {
	case graph.Paused:
		// A pause can be reached again (one of several calls decided):
		// each call's card is shown once per decision round.
		for _, c := range st.Waiting() {
			c := c
			show("announced:"+claimKey(c), Event{Kind: ApprovalNeeded, Thread: thread, State: st, Call: &c})
		}
	case graph.Failed:
		show("failed:"+res.Checkpoint.ID, Event{Kind: RunFailed, Thread: thread, State: st, Text: failureText(res.Checkpoint.Error)})
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

// OnCall is the agent's hook for call progress: pass it as
// agent.Options.OnCall so people see calls start and finish.
func (s *Service) OnCall(ctx context.Context, st *agent.State, c agent.Call) {
	kind := CallFinished
	if c.Status == agent.Running {
		kind = CallStarted
	} else {
		s.opts.Observer.ToolFinished(c.Tool, c.Status)
	}
	_ = s.report(ctx, Event{Kind: kind, Thread: runThread(ctx, st), State: st, Call: &c})
}

type noObserver struct{}

func (noObserver) RunStarted(bool)                       {}
func (noObserver) RunStopped(graph.Status)               {}
func (noObserver) Decided(interrupt.Kind, time.Duration) {}
func (noObserver) ToolFinished(string, agent.CallStatus) {}

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
