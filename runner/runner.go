// Package runner is the conversation service: it maps a thread to an agent
// run and starts, continues, resumes and recovers runs, applying people's
// decisions exactly once. It is independent of Slack: each front end (the
// Slack handlers, the terminal chat, the playground) implements Reporter
// to show what happens, and calls the Service when people act.
//
// Decide is the one door for people's decisions, whatever the front end:
// it owns every rule about them (see Decide), so front ends only show the
// typed errors it returns. DecideAndDrive is that door followed by Drive,
// for a front end that drives the run in the background of a click: it
// answers the person as soon as the decision is claimed, and may claim it
// with the resumed run's first save (decidedrive.go). An approval is bound to the hash of the exact
// arguments the person was shown, and the agent runs a call only if what
// it is about to run has that hash. A thread reply is feedback from
// someone allowed to decide (it rejects the calls they may decide), or a
// note for the model from anyone else.
//
// Decisions are claimed before they are applied. A claim is a set-once
// record in the store, so when two people (or two replicas, or a click
// and an expiry) decide one call at once, exactly one wins and the other
// learns who did. A call whose rule requires several approvals gathers
// them first; the one that completes them claims the decision in the
// same atomic step (see quorum.go). Applying claimed decisions is
// idempotent, so a process that dies between the claim and the resume
// loses nothing: the next drive of the thread applies it.
//
// Runs of one thread never overlap: a run holds the thread's lease, which
// it renews while it works. A process that cannot get the lease leaves the
// work to the holder, which looks for new claims after it lets go.
//
// With an Inbox, the service also keeps, across threads, the calls that
// wait for people and each person's recent decisions, for inboxes such as
// Slack's Home tab (WaitingCalls, WaitsFor, RecentDecisions; inbox.go).
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
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
//
// Every acquisition of a lease gets a token of its own (NewLeaseToken),
// never one that an earlier acquisition had, even by the same owner; only
// that token renews or releases the lease, and it is the fence of the
// run's saves (graph.WithFence). So a run that stalled past its lease is
// fenced from every run after it, its own process's included.
// Implementations must be safe for concurrent use by many goroutines and
// processes.
type Leases interface {
	// AcquireLease makes owner the holder of the thread's lease for ttl
	// if nobody holds it, and returns the acquisition's token; "" if the
	// lease is held, even by owner itself.
	AcquireLease(ctx context.Context, thread, owner string, ttl time.Duration) (token string, err error)
	// RenewLease extends the lease to ttl from now if the acquisition
	// that token names still holds it, and reports whether it did.
	RenewLease(ctx context.Context, thread, token string, ttl time.Duration) (bool, error)
	// ReleaseLease gives up the lease if the acquisition that token
	// names holds it, and leaves it alone otherwise.
	ReleaseLease(ctx context.Context, thread, token string) error
}

// Store is what the runner needs from storage besides the graph's store:
// one interface, one path. A thread's work begins, claims its decisions
// and ends in one round trip each (Sessions), writing with each step the
// records that belong to it — the wake-up schedule, the audit trail, the
// inbox index — so the store that keeps claims and leases keeps those
// too; Options say which of them the service keeps. MemoryStore and
// redisstore.Store implement it, and runnertest.TestStore is its
// contract. Implementations must be safe for concurrent use by many
// goroutines and processes.
type Store interface {
	Claims
	Leases
	Approvals
	Sessions
	Schedule
	Auditor
	Inbox
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
	// ErrInboxNotUpdated: a session's end (Sessions.CloseThread) did
	// everything but the inbox update, which did not take (or is not
	// known to outlive a failover: replicas did not acknowledge it). The
	// service wakes the thread soon, so that a session writes it again.
	ErrInboxNotUpdated = errors.New("the inbox was not updated")
)

// AlreadyDecidedError is the answer to a decision that lost: the call was
// decided already, by Decision.By.
type AlreadyDecidedError struct {
	Key      string
	Decision agent.Decision
}

func (e *AlreadyDecidedError) Error() string {
	if e.Decision.Kind == agent.Expire {
		return fmt.Sprintf("call %s already expired", e.Key)
	}
	return fmt.Sprintf("call %s already %s by %s", e.Key, e.Decision.Kind.Past(), strings.Join(e.Decision.Approvers(), ", "))
}

// Options are the service's optional settings.
type Options struct {
	// LeaseTTL is how long a lease lasts without renewal (default 10s;
	// it is renewed every third of that): a crashed process's threads are
	// picked up by another soon after it lapses.
	LeaseTTL time.Duration
	// BusyWait is how long a reply or a retry waits for another run of
	// the thread to let go before it is refused with ErrBusy (default 5s).
	// A reply to a run that has answered waits a lease longer: that run
	// only lets go, or dies and loses the lease.
	BusyWait time.Duration
	// Owner names this process in leases (default random): each
	// acquisition's token begins with it, so that a lease says which
	// process holds it.
	Owner string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger defaults to a logger that discards.
	Logger logrus.FieldLogger
	// Schedule: the service keeps wake-ups in the store's schedule, for
	// expiry, reminders and crash recovery.
	Schedule bool
	// Audit: the service keeps the audit trail in the store: decisions,
	// refusals, executions and outcomes (audit.go).
	Audit bool
	// Observer, if set, is told what happens, for metrics.
	Observer Observer
	// Groups, if set, answers for approver lists that name user groups;
	// without it a group approver matches nobody.
	Groups Groups
	// Inbox: the service keeps, in the store, the index of the calls
	// that wait for people and of their recent decisions (see
	// WaitingCalls), written in the round trip that ends each session.
	Inbox bool
	// Members, if set, answers whether a person is in a channel, for
	// decisions made from an inbox on calls that anyone in their channel
	// may decide; without it such calls are decided in their channel.
	Members Members
	// Stream: the front end shows answers as the model writes them. The
	// agent then streams the model's replies and the service reports
	// Thinking, AnswerDelta and StreamEnded (see OnStream).
	Stream bool
}

// Service runs conversations. It is safe for concurrent use, by many
// goroutines and many processes sharing one store.
//
// Who calls what. Front ends call Start, Reply, Decide, DecideAndDrive,
// Check, Retry, RestartChanged, CancelChanged and Drive from their
// request goroutines (DecideAndDrive from a background job of theirs),
// any number at once and for any threads; the operator's commands and the
// Home tab call the read-only methods (State, Call, WaitingCalls, WaitsFor,
// RecentDecisions, Changed) likewise. RunSchedule runs Tick on one
// goroutine of each process, one due thread after another. The agent calls
// BeforeCall, OnCall and OnStream on the goroutine running the thread,
// under its lease.
//
// Ordering. Runs of one thread never overlap, across processes: Start,
// Reply, Retry, Drive and Tick's drive do a thread's work only while
// holding its lease (lease.go), which they renew on a timer while they
// work and release when done; whoever cannot take it
// leaves the work to the holder and returns (Drive, Tick) or waits up to
// Options.BusyWait and fails with ErrBusy (Start, Reply, Retry). A
// start's run takes the lease with its first save (starting.go): before
// it, the run has saved, shown and sent nothing, and a start whose first
// save finds the lease held or the thread existing saves nothing. Every
// save of a run is fenced by the token of its acquisition of the lease,
// and a call is not sent once the lease is lost (BeforeCall). So a
// thread's Reporter events come from one goroutine at a time, in the
// run's order; events of different threads interleave. Decide, Check and
// the read-only methods take no lease and may run beside a run of the
// same thread: a decision is claimed in the store, and the run that holds
// the lease finds it before letting go (or the next Drive does).
//
// Blocking. Start, Reply, Retry, Drive and Tick run the model and tools
// and may take minutes; Decide and Check make a few store round trips and
// show nothing, so a front end calls them before acknowledging a click,
// and Drive afterwards, in the background; or it calls DecideAndDrive in
// the background and acknowledges the click once its claimed callback
// is called (a store round trip or two, as Decide). The Reporter is
// called on the run's goroutine and holds it up while it posts.
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

	// asker shows input requests (input.go); see SetAsker.
	asker atomic.Pointer[Asker]

	// carrier carries on the replies kept while a conversation started
	// (starting.go); see SetKeptCarrier.
	carrier atomic.Pointer[KeptCarrier]

	// pending holds, by thread, what was shown after the session that
	// showed it ended, until it is recorded (pending.go).
	pending pendingRecords

	// undelivered are the threads whose latest delivery here failed
	// (deliveredAll): a tick keeps their redelivery wake-up.
	undelivered sync.Map
}

// New returns a service that runs a's graph, keeps claims and leases in
// store and reports to rep. It makes itself a's runner (agent.RunBy), so
// that the agent tells it of every call and asks it before sending one: a
// service runs an agent of its own.
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
	s := &Service{agent: a, graph: a.Graph(), store: store, rep: rep, opts: opts, log: opts.Logger}
	a.RunBy(s, opts.Stream)
	return s
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
	// TS is the request's own message time stamp, if the front end has
	// one (Slack's ts): replies kept while the conversation starts are
	// taken only if they came after it.
	TS string
	// Images are the images the requester attached, fetched and checked
	// by the front end (Text has a line for each); the conversation
	// keeps them in its checkpoint (agent.Agent.UserMessage).
	Images []llm.Image
}

// Start begins a conversation in a new thread and runs it until it
// finishes or pauses. It fails with ErrThreadExists if the thread has
// one already (a retried delivery), and with ErrLeaseLost if nothing of
// the conversation was saved because it lost the thread's lease, or
// another acquisition held it when the first save came: nobody carries
// that run on, so the caller starts it again.
//
// The thread's lease is taken by the run's first save (starting.go),
// unless the store cannot do that or answers are streamed as the model
// writes them (shown before anything is saved): then it is taken first.
func (s *Service) Start(ctx context.Context, req StartRequest) error {
	if s.opts.Stream || !s.store.SavesTakeLease() {
		return s.startOpened(ctx, req)
	}
	if _, ok := s.graph.Cached(req.Thread); ok {
		// This process saved the thread: a retried request is not
		// asked of the model again. (One that another process saved
		// is, and its first save refuses it.)
		return fmt.Errorf("start %s: %w", req.Thread, ErrThreadExists)
	}
	token := NewLeaseToken(s.opts.Owner)
	ss := s.leasedSession(req.Thread, token, "", nil, nil, time.Time{})
	first := &FirstSave{Thread: req.Thread, Token: token, TTL: s.opts.LeaseTTL}
	if s.opts.Schedule {
		first.Wake = s.opts.Now().Add(2 * s.opts.LeaseTTL)
	}
	ss.first = first
	ss.asked[answeredKey] = true // a new thread: nothing was delivered
	runCtx, stop := s.keepLease(WithFirstSave(ctx, first), ss)
	run := s.begin(req.Thread, "start", logrus.Fields{"requester": req.Requester})
	init := s.agent.NewStateWithImages(req.Thread, req.Requester, req.Channel, req.Text, req.Images)
	init.Team = req.Team
	res, err := s.graph.Start(s.endWithSave(runCtx, ss), req.Thread, init, graph.RunConfig{})
	took, _, kept := first.result()
	if !took {
		stop()
		if res == nil && errors.Is(err, graph.ErrThreadExists) && s.lostUnsaved(ctx, runCtx, req.Thread, err) {
			run.WithError(err).Warn("another acquisition held the thread's lease at the first save; nothing was saved, it is to be started again")
			return fmt.Errorf("start %s: nothing was saved: %w", req.Thread, ErrLeaseLost)
		}
		if errors.Is(err, graph.ErrThreadExists) {
			return fmt.Errorf("start %s: %w", req.Thread, ErrThreadExists)
		}
		if err == nil {
			err = errors.New("the checkpoint store took no lease with the first save")
		}
		run.WithError(err).Error("run could not be saved")
		return fmt.Errorf("start %s: %w", req.Thread, err)
	}
	s.after(runCtx, run, ss, res, err)
	stop()
	decided := s.decidedMeanwhile(ss, s.close(ss))
	// Replies typed before the first save were kept for it: they come
	// after the run that made it, as they would have, and drive the
	// thread as any reply does.
	s.carryOnKept(ctx, s.keptReplies(req, kept))
	if !decided {
		return nil
	}
	// A decision made while the cards were being posted was left to us.
	return s.Drive(ctx, req.Thread)
}

// startOpened is Start that takes the thread's lease before it runs.
func (s *Service) startOpened(ctx context.Context, req StartRequest) error {
	ss, held, err := s.open(ctx, req.Thread)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("start %s: %w", req.Thread, ErrBusy)
	}
	if ss.head != "" {
		// A request started before, whose start was not recorded (its
		// process died while it carried the run on): the model is not
		// asked again.
		s.close(ss)
		return fmt.Errorf("start %s: %w", req.Thread, ErrThreadExists)
	}
	runCtx, stop := s.keepLease(ctx, ss)
	run := s.begin(req.Thread, "start", logrus.Fields{"requester": req.Requester})
	init := s.agent.NewStateWithImages(req.Thread, req.Requester, req.Channel, req.Text, req.Images)
	init.Team = req.Team
	res, err := s.graph.Start(s.endWithSave(runCtx, ss), req.Thread, init, graph.RunConfig{})
	ss.asked[answeredKey] = true // a new thread: nothing was delivered
	if res == nil && s.lostUnsaved(ctx, runCtx, req.Thread, err) {
		run.WithError(err).Warn("lost the thread's lease before the conversation was saved; it is to be started again")
		stop()
		s.close(ss)
		return fmt.Errorf("start %s: nothing was saved: %w", req.Thread, ErrLeaseLost)
	}
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

// lostUnsaved reports whether a start that ended with err, having
// returned no checkpoint, lost the thread's lease (a fenced save, which
// the graph takes for a thread that exists, or a run stopped when a
// renewal found the lease gone) and the thread has no checkpoint: the
// run's first save, merged into a later one, never landed.
func (s *Service) lostUnsaved(ctx, runCtx context.Context, thread string, err error) bool {
	if err == nil {
		return false
	}
	if !errors.Is(err, graph.ErrConflict) && !errors.Is(err, graph.ErrThreadExists) &&
		!errors.Is(err, ErrLeaseLost) && !errors.Is(context.Cause(runCtx), ErrLeaseLost) {
		return false
	}
	// A thread that has a checkpoint is carried on by whoever wrote it;
	// if it cannot be read, starting again is safe: a second start finds
	// the thread and stops.
	_, err = s.graph.State(ctx, thread)
	return err != nil
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

// ExpireDue expires the thread's pending calls, and calls asking for
// input, whose deadline has passed
// and drives the run on. It reports how many calls it expired.
func (s *Service) ExpireDue(ctx context.Context, thread string) (int, error) {
	res, err := s.graph.State(ctx, thread)
	if err != nil {
		return 0, err
	}
	now := s.opts.Now()
	d := agent.Decision{Kind: agent.Expire, At: now}
	n := 0
	for c := range res.State.AllWaiting() {
		if (c.Status != agent.Pending && c.Status != agent.Asking) || c.Expires.IsZero() || now.Before(c.Expires) {
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
// again once its lease lapses. A drive stopped because it lost the lease
// while it worked fails with ErrLeaseLost.
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
		again, err := s.closeStep(ss, runCtx, worked, err)
		if !again {
			return err
		}
	}
}

// closeStep ends the session of a drive's step, whose lease is no longer
// renewed, and reports whether to drive the thread again: a decision or
// an approval that came in while the session held the lease was left to
// it.
func (s *Service) closeStep(ss *session, runCtx context.Context, worked bool, err error) (again bool, _ error) {
	claims := s.close(ss)
	if err != nil && errors.Is(context.Cause(runCtx), ErrLeaseLost) {
		// The run was stopped for it: say so, not "context canceled".
		return false, fmt.Errorf("drive %s: %w", ss.thread, ErrLeaseLost)
	}
	if err != nil {
		return false, err
	}
	if !worked {
		// Nothing to run, but a decision or an approval may have come
		// in while we held the lease: its process left it to us.
		return s.changedMeanwhile(ss, claims), nil
	}
	// Work was done. Claims made while we held the lease were left to
	// us: go on if there are any.
	return ss.res == nil || s.decidedMeanwhile(ss, claims), nil
}

// driveOn ends a session that a click's save began (DecideAndDrive), as
// Drive ends each of its steps, and drives the thread again if Drive
// would.
func (s *Service) driveOn(ctx context.Context, ss *session, runCtx context.Context, worked bool, err error) error {
	again, err := s.closeStep(ss, runCtx, worked, err)
	if !again {
		return err
	}
	return s.Drive(ctx, ss.thread)
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
		run := s.begin(thread, "recover", nil)
		run.Warn("recovering a run cut off by a crash")
		s.showCutOff(ctx, thread, &res.State)
		out, err := s.graph.Recover(s.endWithSave(ctx, ss), thread)
		s.auditCutOff(ctx, res, out)
		s.after(ctx, run, ss, out, err)
		return !errors.Is(err, graph.ErrIncompatible), nil
	case graph.Paused:
		if err := s.graph.Compatible(res.Checkpoint); err != nil && s.graphChanged(ctx, s.log.WithField("thread", thread), thread, err) {
			return false, nil
		}
		decisions, err := s.claimed(ss, &res.State)
		if err != nil {
			return false, err
		}
		if len(decisions) == 0 {
			ss.res = res   // what close reads back the claims of
			ss.found = res // its cards may be being shown (awaitCard)
			if !s.deliveredAll(thread, s.deliver(ctx, s.log.WithField("thread", thread), ss, res)) {
				ss.redeliver = true // shown again shortly, as after a run
			}
			ss.inbox = res
			return false, nil
		}
		// People see each decision as it is applied: here, in the work
		// after the click, not in the click's acknowledgement.
		keys := slices.Sorted(maps.Keys(decisions))
		for _, key := range keys {
			c, _ := res.State.Call(key)
			if decisions[key].Kind == agent.Edit && c.Quorum() > 1 {
				continue // it waits again: its card shows the reset once applied
			}
			decided, d := *c, decisions[key]
			decided.Decision = &d
			_ = s.report(ctx, Event{Kind: CallDecided, Thread: thread, State: &res.State, Call: &decided})
			if d.Kind == agent.Expire && c.Status == agent.Asking {
				s.closeQuestions(ctx, thread, *c)
			}
		}
		run := s.begin(thread, "resume", nil)
		mark := ss.auditMark()
		s.auditSettled(ctx, res, keys, decisions)
		// The inbox's record of the decisions goes with the session's
		// end, which may be the resumed run's last save.
		decided := ss.decided
		for _, key := range keys {
			if d := decisions[key]; d.By != "" && d.Kind != agent.Expire && d.Kind != agent.Answer {
				c, _ := res.State.Call(key)
				ss.decided = append(ss.decided, decisionRecord(thread, &res.State, *c, d))
			}
		}
		ss.from = res
		out, err := s.graph.ResumeAt(s.endWithSave(ctx, ss), thread, res.Checkpoint.ID, s.agent.Decide(decisions))
		if errors.Is(err, graph.ErrConflict) {
			run.Info("another process resumed the thread first")
			ss.dropAudit(mark)
			ss.res, ss.decided, ss.from = nil, decided, nil
			return true, nil // look again
		}
		if out == nil {
			ss.decided = decided
		}
		s.after(ctx, run, ss, out, err)
		return !errors.Is(err, graph.ErrIncompatible), nil
	case graph.Failed:
		if n, auto := s.retriesUnsent(res); auto {
			// The run stopped before sending a call (see retriesUnsent):
			// send it now.
			run := s.begin(thread, "retry", logrus.Fields{"unsent": n})
			out, err := s.graph.ResumeAt(s.endWithSave(ctx, ss), thread, res.Checkpoint.ID, nil)
			if errors.Is(err, graph.ErrConflict) {
				run.Info("another process resumed the thread first")
				ss.res = nil
				return true, nil // look again
			}
			s.after(ctx, run, ss, out, err)
			return true, nil
		}
		s.deliver(ctx, s.log.WithField("thread", thread), ss, res)
		ss.inbox = res
		return false, nil
	default:
		// Nothing to run: make sure people have seen what the thread
		// holds (a process may have died before showing it).
		s.deliver(ctx, s.log.WithField("thread", thread), ss, res)
		ss.inbox = res
		return false, nil
	}
}

type noObserver struct{}

func (noObserver) RunStarted(bool)                       {}
func (noObserver) RunStopped(graph.Status)               {}
func (noObserver) Decided(agent.Kind, time.Duration)     {}
func (noObserver) ToolFinished(string, agent.CallStatus) {}
