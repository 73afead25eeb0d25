package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
)

// Sessions is how the service begins and ends its work on a thread, and
// claims a decision, in one round trip each, writing with each step the
// records that belong to it. It is part of Store: there is no slower path
// for stores without it.
type Sessions interface {
	// OpenThread acquires Owner's lease on the thread for TTL unless
	// someone holds it (with a token of its own, as Leases.AcquireLease
	// does), moves the thread's wake-up no later than WakeIfHeld or
	// WakeIfBusy (whichever applies; zero: leave it), and returns, as of
	// that moment, the acquisition's token, the head checkpoint's ID
	// ("" if the store cannot tell) and the claims of Keys that are set.
	OpenThread(ctx context.Context, o Opening) (Opened, error)
	// CloseThread records the deliveries Record (set-once claims), raises
	// the "answered" claim to Answered (if ≥ 0), sets the thread's
	// wake-up and waiting count (if Schedule), appends the Audit
	// entries to the audit trail, applies Inbox (if set) as UpdateInbox
	// does, releases the lease if the acquisition that Token names
	// holds it, and returns the claims of Keys that are set once the
	// lease is free. When all but the inbox update was done, it returns
	// the claims and an error that wraps ErrInboxNotUpdated.
	CloseThread(ctx context.Context, c Closing) (map[string][]byte, error)
	// ClaimDecision is Claim that writes the thread's wake-up (if WakeBy
	// is set) before the claim and the audit record (if any) with a
	// claim it wins; it fails with ErrStale, writing nothing, if
	// ExpectHead is set and the thread's head checkpoint is another.
	// With LeaseOwner set, a claim it wins also takes the thread's lease
	// for LeaseOwner if nobody holds it, with a token of its own
	// (OpenThread's part, for the drive that follows), and reads the
	// head's ID and the claims of Keys.
	ClaimDecision(ctx context.Context, c DecisionClaim) (Claimed, error)
	// ClaimApproval is Approve that first fails with ErrStale, writing
	// nothing, if ExpectHead is set and the thread's head checkpoint is
	// another, and writes the thread's wake-up (if WakeBy is set). When
	// it records the approval and LeaseOwner is set, it also takes the
	// thread's lease if nobody holds it, with a token of its own, and
	// then reads the head's ID and the claims of Keys.
	ClaimApproval(ctx context.Context, c ApprovalClaim) (ApprovalClaimed, error)
	// ClaimValues returns the thread's claims of keys that are set: a
	// read of what a step needs, whatever the thread's history.
	ClaimValues(ctx context.Context, thread string, keys []string) (map[string][]byte, error)
	// RecordDeliveries records deliveries made after the sessions that
	// showed them ended (their last save let go of the lease), of
	// several threads in one round trip: for each of ds, the set-once
	// claims Record and the "answered" claim raised to Answered (if >
	// 0). With Move, it then moves the thread's wake-up to Wake (zero:
	// none) if it is still WakeSet, the one that last save set; a later
	// step's wake-up is left alone. It needs no lease. It returns nil if
	// every thread's were recorded, else the error of each of ds in ds's
	// order (nil: recorded): a thread that fails loses no other's.
	RecordDeliveries(ctx context.Context, ds []Deliveries) []error
	// KeepReply keeps reply, for ttl, for the thread's first save to hand
	// over (FirstSave) if the thread has no head and nobody holds its
	// lease: KeptReply. A thread with a head is NotKept; one without a
	// head whose lease is held is KeptNot. A store whose saves cannot
	// take the lease (FirstSave) keeps nothing and says KeptNot: the
	// service then opens a start's thread before it runs.
	KeepReply(ctx context.Context, thread string, reply []byte, ttl time.Duration) (Kept, error)
	// TakeBackReply takes reply, as KeepReply was given it, out of the
	// replies kept for the thread's first save if the thread still has
	// no head, in one step with that check, so that a first save made
	// later does not hand it over. It reports started, nothing changed,
	// if the thread has a head.
	TakeBackReply(ctx context.Context, thread string, reply []byte) (started bool, err error)
	// SavesTakeLease reports whether the graph's saves to this store
	// take a start's lease when asked (FirstSave): a store that keeps
	// the checkpoints. Without it, Start opens the thread first.
	SavesTakeLease() bool
	// ClaimsWithSaves reports whether the graph's saves on this storage
	// write a SavedClaim that their context carries, with the checkpoint
	// in one step (see SavedClaim). A store that cannot says false: the
	// service then claims each decision on its own (ClaimDecision).
	ClaimsWithSaves() bool
}

// Deliveries is what RecordDeliveries is asked of one thread.
type Deliveries struct {
	Thread   string
	Record   []string
	Answered int
	Move     bool
	// WakeSet and Wake are the wake-up the session's last save set and
	// the one it planned (zero: none).
	WakeSet, Wake time.Time
}

// LastSave is what a run's last save (it pauses, finishes or fails the
// run) writes besides the checkpoint, when the store can write it in the
// same atomic step: Closing's schedule, waiting count, audit entries and
// inbox update, the release of the lease (Closing.Token, which fences the
// save), and a read of Closing.Keys after it — CloseThread's work, less
// the deliveries, which are shown after the checkpoint is durable and so
// after the lease is let go (RecordDeliveries). The runner puts it in the
// save's context (graph.WithLastSave); a store that writes it calls
// Closed, and one that cannot ignores it: the service then ends the
// session with CloseThread as usual.
type LastSave struct {
	Closing Closing

	// planned is the wake-up the session planned; Closing's is sooner
	// until what was shown is recorded.
	planned time.Time

	mu       sync.Mutex
	closed   bool
	claims   map[string][]byte
	inboxErr error
}

// Closed says that the save wrote l's Closing and let go of the lease:
// claims are the values of Closing.Keys read after that, and inboxErr
// what became of the inbox update or the audit entries, if they failed
// alone.
func (l *LastSave) Closed(claims map[string][]byte, inboxErr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed, l.claims, l.inboxErr = true, claims, inboxErr
}

func (l *LastSave) result() (closed bool, claims map[string][]byte) {
	if l == nil {
		return false, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed, l.claims
}

type lastSaveKey struct{}

// WithLastSave returns ctx for a save that may carry l.
func WithLastSave(ctx context.Context, l *LastSave) context.Context {
	return context.WithValue(ctx, lastSaveKey{}, l)
}

// LastSaveOf returns what the save ctx belongs to may write besides the
// checkpoint, or nil.
func LastSaveOf(ctx context.Context) *LastSave {
	l, _ := ctx.Value(lastSaveKey{}).(*LastSave)
	return l
}

// Opening is what OpenThread is asked.
//
// Record and Answered are deliveries of an earlier session to record
// first, as RecordDeliveries does (Answered if > 0), whether or not the
// lease is taken.
type Opening struct {
	Thread, Owner          string
	TTL                    time.Duration
	WakeIfHeld, WakeIfBusy time.Time
	Keys                   []string
	Record                 []string
	Answered               int
}

// Opened is what OpenThread found. Token is the acquisition's, when Held.
type Opened struct {
	Held   bool
	Token  string
	Head   string
	Claims map[string][]byte
}

// Closing is what CloseThread is asked. Token is the lease's, as
// OpenThread or ClaimDecision returned it.
type Closing struct {
	Thread, Token string
	Record        []string
	Answered      int
	Schedule      bool
	Wake          time.Time // zero: no wake-up
	Waiting       int
	Audit         []map[string]string
	Keys          []string
	Inbox         *InboxUpdate
}

// DecisionClaim is what ClaimDecision is asked. Record and Answered are
// as Opening's: recorded unless the claim fails with ErrStale.
type DecisionClaim struct {
	Thread, Key string
	Value       []byte
	ExpectHead  string
	WakeBy      time.Time
	Audit       map[string]string
	LeaseOwner  string
	LeaseTTL    time.Duration
	Keys        []string
	Record      []string
	Answered    int
}

// Claimed is what ClaimDecision did: the claim's value and whether this
// call set it; whether it took the lease, and then the acquisition's
// token, the head's ID and the claims of Keys that are set.
type Claimed struct {
	Winner []byte
	Won    bool
	Leased bool
	Token  string
	Head   string
	Claims map[string][]byte
}

// ErrStale: a claim was checked against a state that is no longer the
// thread's latest; nothing was written.
var ErrStale = errors.New("the thread has changed since it was read")

// answeredKey is the claim that counts the messages whose answers people
// have been shown: every answer before that index was delivered.
const answeredKey = "answered"

// session is one holding of a thread's lease by this process: what was
// read when it began, and what to write when it ends.
type session struct {
	thread string
	// token is the lease's acquisition: it fences the session's saves,
	// and only it renews and releases the lease.
	token string
	// head and claims are what the store held when the lease was taken
	// (head "": unknown); asked lists the claim keys read so far.
	head   string
	claims map[string][]byte
	asked  map[string]bool
	// record, answered and the schedule are written when the session
	// ends.
	record    []string
	answered  int
	schedule  bool
	wake      time.Time
	waiting   int
	res       *graph.Result[agent.State]
	redeliver bool
	// inbox is the state whose waiting calls the inbox index is to hold
	// when the session ends (nil: leave it), and decided the decisions
	// the session applied.
	inbox   *graph.Result[agent.State]
	decided []DecisionRecord
	// confirmed is when a request that (re)confirmed the lease was sent;
	// audit holds entries to write with the next ones, or at the end.
	mu        sync.Mutex
	confirmed time.Time
	audit     []map[string]string
	// end is what the run's last save was asked to end the session
	// with (nil: no such save); from the paused checkpoint the session
	// resumed (heldElsewhere), found the one it found paused with
	// nothing to resume (awaitCard).
	end   *LastSave
	from  *graph.Result[agent.State]
	found *graph.Result[agent.State]
	// first, for a start whose first save takes the lease, is what that
	// save was asked: until it took the lease, there is none to renew.
	first *FirstSave
	// claim is the decision's claim that the session's first save
	// carries, which takes the lease (DecideAndDrive).
	claim *SavedClaim
}

func (ss *session) queueAudit(recs ...map[string]string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.audit = append(ss.audit, recs...)
}

// takeAudit returns the queued entries and forgets them.
func (ss *session) takeAudit() []map[string]string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	recs := ss.audit
	ss.audit = nil
	return recs
}

// peekAudit returns a copy of the queued entries.
func (ss *session) peekAudit() []map[string]string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return slices.Clone(ss.audit)
}

// dropAuditFront forgets the first n queued entries, written since.
func (ss *session) dropAuditFront(n int) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.audit = ss.audit[min(n, len(ss.audit)):]
}

// auditMark and dropAudit forget the entries queued since a mark.
func (ss *session) auditMark() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.audit)
}

func (ss *session) dropAudit(mark int) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.audit) > mark {
		ss.audit = ss.audit[:mark]
	}
}

// setEnd and ending are ss.end, which the lease's renewals read.
func (ss *session) setEnd(l *LastSave) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.end = l
}

func (ss *session) ending() *LastSave {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.end
}

// ended reports whether the run's last save ended the session and let
// go of the lease.
func (ss *session) ended() bool {
	closed, _ := ss.ending().result()
	return closed
}

func (ss *session) confirm(at time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if at.After(ss.confirmed) {
		ss.confirmed = at
	}
}

func (ss *session) lastConfirmed() time.Time {
	if ss.first != nil {
		if took, sent, _ := ss.first.result(); took {
			ss.confirm(sent)
		}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.confirmed
}

// unleased reports whether the session's lease is still to be taken by
// its first save.
func (ss *session) unleased() bool {
	return ss.first != nil && !ss.first.Taken()
}

type sessionKey struct{}

// neededKeys are the claims the service reads about a thread at res: the
// decisions on and cards of its waiting calls, the answered count, and a
// failed run's error card.
func neededKeys(res *graph.Result[agent.State]) []string {
	keys := []string{answeredKey}
	if res == nil {
		return keys
	}
	for c := range res.State.AllWaiting() {
		keys = append(keys, claimKey(c), announceKey(c))
		keys = append(keys, quorumKeys(c)...)
	}
	if res.Status() == graph.Failed {
		keys = append(keys, "failed:"+res.Checkpoint.ID)
	}
	return keys
}

// open takes the thread's lease if nobody holds it, and makes sure the
// thread is looked at again should this process die (or, if it is held,
// once the holder's lease would have lapsed).
func (s *Service) open(ctx context.Context, thread string) (*session, bool, error) {
	if ss := s.takeOpened(ctx, thread); ss != nil {
		// The claim that began it read the claims before this
		// process's records of what it showed were written, perhaps.
		s.overlayRecords(ss)
		return ss, true, nil
	}
	now := s.opts.Now()
	var wakeHeld, wakeBusy time.Time
	if s.opts.Schedule {
		wakeHeld, wakeBusy = now.Add(2*s.opts.LeaseTTL), now.Add(s.opts.LeaseTTL)
	}
	sent := time.Now()
	var keys []string
	if cached, ok := s.graph.Cached(thread); ok {
		keys = neededKeys(cached)
	}
	shown := s.takeRecords(thread)
	record, answered := recordsOf(shown)
	o, err := s.store.OpenThread(ctx, Opening{Thread: thread, Owner: s.opts.Owner, TTL: s.opts.LeaseTTL,
		WakeIfHeld: wakeHeld, WakeIfBusy: wakeBusy, Keys: keys, Record: record, Answered: answered})
	if err != nil {
		s.returnRecords(thread, shown)
		return nil, false, fmt.Errorf("lease %s: %w", thread, err)
	}
	if !o.Held {
		return nil, false, nil
	}
	if o.Token == "" {
		return nil, false, fmt.Errorf("lease %s: the store took it without a token", thread)
	}
	return s.leasedSession(thread, o.Token, o.Head, o.Claims, keys, sent), true, nil
}

// closeTimeout bounds the store's work of ending a session.
const closeTimeout = 5 * time.Second

// close ends the session: it records what was delivered, sets the
// schedule, lets go of the lease, and returns the decisions claimed on
// the calls that still wait.
func (s *Service) close(ss *session) map[string][]byte {
	if closed, claims := ss.ending().result(); closed {
		// The run's last save ended the session, with the entries
		// queued until then; those queued since are appended on their
		// own.
		ss.dropAuditFront(len(ss.ending().Closing.Audit))
		if s.opts.Audit {
			if recs := ss.takeAudit(); len(recs) > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
				if err := s.store.AuditAll(ctx, recs); err != nil {
					s.log.WithField("thread", ss.thread).WithError(err).Warn("ending work on the thread")
				}
				cancel()
			}
		}
		s.inboxChanged(ss.end.Closing.Inbox)
		return claims
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if ss.redeliver && s.opts.Schedule {
		at := s.opts.Now().Add(redeliverAfter)
		if !ss.schedule {
			s.wakeBy(ctx, ss.thread, at)
		} else if ss.wake.IsZero() || at.Before(ss.wake) {
			ss.wake = at
		}
	}
	keys := closeKeys(ss.res)
	var audit []map[string]string
	if s.opts.Audit {
		audit = ss.takeAudit()
	}
	// The inbox index is written in the same round trip, while the
	// lease is still held, so that the next session's update comes
	// after it.
	inbox := s.inboxUpdate(ss)
	claims, err := s.store.CloseThread(ctx, Closing{Thread: ss.thread, Token: ss.token, Record: ss.record,
		Answered: ss.answered, Schedule: ss.schedule && s.opts.Schedule, Wake: ss.wake, Waiting: ss.waiting,
		Audit: audit, Keys: keys, Inbox: inbox})
	if err != nil {
		s.log.WithField("thread", ss.thread).WithError(err).Warn("ending work on the thread")
	}
	if errors.Is(err, ErrInboxNotUpdated) {
		// The Home tab would miss (or keep) this thread's calls until
		// its next session: have one soon, which writes them again.
		s.wakeBy(ctx, ss.thread, s.opts.Now().Add(inboxRetryAfter))
	}
	s.inboxChanged(inbox)
	return claims
}

// inboxRetryAfter is how soon a thread whose session's end could not
// update the inbox is looked at again, to write it.
const inboxRetryAfter = 2 * time.Second

// stateIn returns the thread's state for a session: the one this process
// has cached if it is the head the session began with, else the stored
// one; and makes sure the session has read the claims it needs.
func (s *Service) stateIn(ctx context.Context, ss *session) (*graph.Result[agent.State], error) {
	var res *graph.Result[agent.State]
	if cached, ok := s.graph.Cached(ss.thread); ok && ss.head != "" && cached.Checkpoint.ID == ss.head {
		res = cached
	} else {
		var err error
		if res, err = s.graph.State(ctx, ss.thread); err != nil {
			return nil, err
		}
	}
	if err := s.readClaims(ctx, ss, neededKeys(res)); err != nil {
		return nil, err
	}
	return res, nil
}

// readClaims reads the claims of keys the session has not read yet.
func (s *Service) readClaims(ctx context.Context, ss *session, keys []string) error {
	var missing []string
	for _, k := range keys {
		if !ss.asked[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	got, err := s.store.ClaimValues(ctx, ss.thread, missing)
	if err != nil {
		return err
	}
	for _, k := range missing {
		ss.asked[k] = true
	}
	for k, v := range got {
		ss.claims[k] = v
	}
	return nil
}

// answeredFrom returns from which message on answers may not have been
// shown yet, and which answers before that were recorded one by one.
func (s *Service) unshownAnswers(ctx context.Context, ss *session, st *agent.State) ([]int, error) {
	from := 0
	if v, ok := ss.claims[answeredKey]; ok {
		from, _ = strconv.Atoi(string(v))
	}
	var idx []int
	for i := from; i < len(st.Messages); i++ {
		if m := st.Messages[i]; m.Role == llm.RoleAssistant && len(m.ToolCalls) == 0 && m.Content != "" {
			idx = append(idx, i)
		}
	}
	if _, ok := ss.claims[answeredKey]; ok || len(idx) == 0 {
		return idx, nil
	}
	// A thread written before the answered count: its answers were
	// recorded one by one.
	keys := make([]string, len(idx))
	for i, n := range idx {
		keys[i] = fmt.Sprintf("answered:%d", n)
	}
	if err := s.readClaims(ctx, ss, keys); err != nil {
		return nil, err
	}
	var out []int
	for i, n := range idx {
		if _, seen := ss.claims[keys[i]]; !seen {
			out = append(out, n)
		}
	}
	return out, nil
}

// writeSchedule sets the thread's wake-up (none when at is zero) and
// waiting count.
func (s *Service) writeSchedule(ctx context.Context, thread string, at time.Time, waiting int) {
	if err := s.store.SetWaiting(ctx, thread, waiting); err != nil {
		s.log.WithField("thread", thread).WithError(err).Warn("recording waiting calls")
	}
	var err error
	if at.IsZero() {
		err = s.store.Forget(ctx, thread)
	} else {
		err = s.store.Wake(ctx, thread, at)
	}
	if err != nil {
		s.log.WithField("thread", thread).WithError(err).Warn("updating the schedule")
	}
}

// keepOpened keeps a session that a decision's claim opened, for the
// drive that follows it in this process.
func (s *Service) keepOpened(ss *session) {
	s.openedMu.Lock()
	defer s.openedMu.Unlock()
	if s.opened == nil {
		s.opened = map[string]*session{}
	}
	// Sessions whose drive never came have lost their lease by now.
	for thread, old := range s.opened {
		if time.Since(old.lastConfirmed()) > s.opts.LeaseTTL {
			delete(s.opened, thread)
		}
	}
	// One lease, one session. A session of another acquisition is an
	// earlier one, whose lease lapsed before this one could be taken.
	if old, ok := s.opened[ss.thread]; ok && old.token == ss.token {
		return
	}
	s.opened[ss.thread] = ss
}

// takeOpened returns the session a claim opened on the thread, if its
// lease was confirmed recently enough to be sure it still holds; an older
// one is let go.
func (s *Service) takeOpened(ctx context.Context, thread string) *session {
	s.openedMu.Lock()
	ss, ok := s.opened[thread]
	delete(s.opened, thread)
	s.openedMu.Unlock()
	if !ok {
		return nil
	}
	if time.Since(ss.lastConfirmed()) < s.opts.LeaseTTL/2 {
		return ss
	}
	s.release(thread, ss.token)
	return nil
}
