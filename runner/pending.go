package runner

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
)

// A session whose run pauses, finishes or fails ends with that last save:
// the store writes the checkpoint and what the session's close wrote —
// the schedule, the waiting count, the audit entries, the inbox — and
// lets go of the lease, in one step (LastSave). People are shown what the
// run produced only once that checkpoint is durable, so the records of
// what was shown (set-once claims, the "answered" count) are written
// after the lease is gone. They need no lease: a record is written once
// (its first writer wins) and the count only grows.
//
// Until they are written, the last save's wake-up covers them: it is set
// soon (redeliverAfter, or the planned one if that is sooner), so that a
// process that dies before showing everything has it shown by whoever
// looks at the thread then — twice rather than never. Once shown, the
// records ride on this process's next step on the thread (the claim of a
// click, the opening of a reply's run) if it comes first; else the
// service's writer (pendingRecords) writes them within recordAfter, with
// those of every other thread waiting then, in one round trip, and with
// the planned wake-up, which replaces the recovery one only if that is
// still the thread's wake-up: a later step's wake-up wins. A first turn,
// which no next step follows, so costs no round trip of its own.
//
// Another process that resumes the thread meanwhile (a click it handled)
// does not show again the cards of calls that waited at the checkpoint it
// resumed from while that checkpoint is recent: the process that saved it
// is showing them (holdFor). It keeps its own recovery wake-up instead,
// so that, should that process have died, they are shown then. A card
// with news to show — an approval of several, or an edit's reset — is the
// exception: it is to be updated, so the process waits a little for the
// card's record (awaitCard), rather than post a second card or leave the
// count to the wake-up.

// recordAfter is how long shown deliveries wait at most for this
// process's next step on the thread before the writer writes them (a
// time.Duration; tests change it).
var recordAfter atomic.Int64

func init() { recordAfter.Store(int64(time.Second)) }

// holdFor is how long the cards of a paused checkpoint are its saver's to
// show.
const holdFor = redeliverAfter

// recordWait bounds a flush of the records held (FlushRecords aside).
const recordWait = 5 * time.Second

// pendingRecords holds what was shown after the session that showed it
// ended, by thread, until it is recorded: by the thread's next step
// (takeRecords), or by the service's one writer. That writer flushes
// recordAfter after the oldest record it holds was held, and writes
// every thread's then, oldest first, in one round trip
// (RecordDeliveries): a busy process writes a batch at most about every
// recordAfter, whatever the number of threads, and no record waits
// longer than that.
type pendingRecords struct {
	mu       sync.Mutex
	byThread map[string]*shownRecords
	held     uint64 // records held so far: the order of the next one
	// writing are the records of the flush under way, by thread: shown,
	// though not in byThread (overlayRecords); written is closed when
	// that flush is over.
	writing map[string]*shownRecords
	written chan struct{}
	// flush is the writer's timer; armed while it is to fire.
	flush *time.Timer
	armed bool
}

// shownRecords are deliveries shown and not yet recorded, of one thread.
type shownRecords struct {
	record   []string
	answered int
	// move: the wake-up is to move from set to planned.
	move         bool
	set, planned time.Time
	// order and since: when the thread's oldest record still held was
	// held, in order and in time.
	order uint64
	since time.Time
}

// holdRecords keeps what a session whose last save ended it has shown,
// to be written with the thread's next step or by the writer.
func (s *Service) holdRecords(thread string, r *shownRecords) {
	if len(r.record) == 0 && r.answered <= 0 && !r.move {
		return
	}
	p := &s.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byThread == nil {
		p.byThread = map[string]*shownRecords{}
	}
	if old, ok := p.byThread[thread]; ok {
		r.record = append(slices.Clone(old.record), r.record...)
		r.answered = max(r.answered, old.answered)
		r.order, r.since = old.order, old.since
	} else {
		p.held++
		r.order, r.since = p.held, time.Now()
	}
	p.byThread[thread] = r
	if !p.armed && p.writing == nil {
		s.armFlush(r.since)
	}
}

// armFlush sets the writer's timer to fire recordAfter after since, the
// oldest record's time. The caller holds s.pending.mu.
func (s *Service) armFlush(since time.Time) {
	p := &s.pending
	d := time.Until(since.Add(recordAfterNow()))
	if p.flush == nil {
		p.flush = time.AfterFunc(d, s.flushRecords)
	} else {
		p.flush.Reset(d)
	}
	p.armed = true
}

// flushRecords is the writer: it writes every record held, oldest first,
// in one round trip, logs each thread's failure, and sets its timer again
// if records were held meanwhile.
func (s *Service) flushRecords() {
	p := &s.pending
	p.mu.Lock()
	p.armed = false
	if p.writing != nil {
		// A timer stopped too late (FlushRecords) and set again: the
		// flush under way sets it again when it is over.
		p.mu.Unlock()
		return
	}
	batch := p.takeAll()
	if len(batch) == 0 {
		p.mu.Unlock()
		return
	}
	p.writing, p.written = make(map[string]*shownRecords, len(batch)), make(chan struct{})
	for _, r := range batch {
		p.writing[r.thread] = r.shownRecords
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), recordWait)
	errs := s.recordNow(ctx, batch)
	cancel()
	for i, err := range errs {
		if err != nil {
			s.log.WithField("thread", batch[i].thread).WithError(err).Warn("recording what was shown")
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.written)
	p.writing, p.written = nil, nil
	if oldest, ok := p.oldest(); ok && !p.armed {
		s.armFlush(oldest)
	}
}

// threadRecords are a thread's records, as a flush takes them.
type threadRecords struct {
	thread string
	*shownRecords
}

// takeAll returns and forgets every record held, oldest first. The
// caller holds p.mu.
func (p *pendingRecords) takeAll() []threadRecords {
	if len(p.byThread) == 0 {
		return nil
	}
	all := make([]threadRecords, 0, len(p.byThread))
	for thread, r := range p.byThread {
		all = append(all, threadRecords{thread, r})
	}
	slices.SortFunc(all, func(a, b threadRecords) int { return cmp.Compare(a.order, b.order) })
	clear(p.byThread)
	return all
}

// oldest returns when the oldest record held was held, if any is. The
// caller holds p.mu.
func (p *pendingRecords) oldest() (time.Time, bool) {
	var first *shownRecords
	for _, r := range p.byThread {
		if first == nil || r.order < first.order {
			first = r
		}
	}
	if first == nil {
		return time.Time{}, false
	}
	return first.since, true
}

// takeRecords returns and forgets the thread's records not yet written,
// for a step that writes them; nil if there are none.
func (s *Service) takeRecords(thread string) *shownRecords {
	p := &s.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.byThread[thread]
	if !ok {
		return nil
	}
	delete(p.byThread, thread)
	return r
}

// returnRecords gives back records that a step could not write.
func (s *Service) returnRecords(thread string, r *shownRecords) {
	if r == nil {
		return
	}
	// The wake-up they were to move has been moved since, or not: it is
	// the recovery one at worst.
	r.move = false
	s.holdRecords(thread, r)
}

// overlayRecords adds to the session's claims what this process has
// shown of the thread and not yet recorded.
func (s *Service) overlayRecords(ss *session) {
	p := &s.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range []*shownRecords{p.writing[ss.thread], p.byThread[ss.thread]} {
		if r == nil {
			continue
		}
		for _, k := range r.record {
			ss.claims[k] = []byte("1")
		}
		if r.answered > 0 {
			cur, _ := strconv.Atoi(string(ss.claims[answeredKey]))
			if _, ok := ss.claims[answeredKey]; !ok || cur < r.answered {
				ss.claims[answeredKey] = []byte(strconv.Itoa(r.answered))
			}
		}
	}
}

// recordsOf returns what a step that writes r sends: the records and the
// answered count (0: none).
func recordsOf(r *shownRecords) ([]string, int) {
	if r == nil {
		return nil, 0
	}
	return r.record, r.answered
}

// recordNow writes the records of batch in one round trip and returns
// the error of each (nil: none failed).
func (s *Service) recordNow(ctx context.Context, batch []threadRecords) []error {
	ds := make([]Deliveries, len(batch))
	for i, r := range batch {
		ds[i] = Deliveries{Thread: r.thread, Record: r.record, Answered: r.answered,
			Move: r.move && s.opts.Schedule, WakeSet: r.set, Wake: r.planned}
	}
	return s.store.RecordDeliveries(ctx, ds)
}

// FlushRecords writes now every delivery record this process holds (see
// holdRecords), and waits for the writer's flush under way: before it
// stops, so that another process does not show again what this one has
// shown.
func (s *Service) FlushRecords(ctx context.Context) error {
	p := &s.pending
	p.mu.Lock()
	batch := p.takeAll()
	if p.armed {
		p.flush.Stop()
		p.armed = false
	}
	written := p.written
	p.mu.Unlock()
	var first error
	if len(batch) > 0 {
		for _, err := range s.recordNow(ctx, batch) {
			if err != nil && first == nil {
				first = err
			}
		}
	}
	if written != nil {
		select {
		case <-written:
		case <-ctx.Done():
			return cmp.Or(first, ctx.Err())
		}
	}
	return first
}

// endWithSave returns the context of a run of the session whose last save
// also ends the session, if the store can (LastSave).
func (s *Service) endWithSave(ctx context.Context, ss *session) context.Context {
	return graph.WithLastSave(ctx, func(ctx context.Context, res *graph.Result[agent.State]) context.Context {
		l := s.lastSave(ss, res)
		ss.setEnd(l)
		return WithLastSave(ctx, l)
	})
}

// lastSave is what the last save of res ends the session with: the
// schedule (with the recovery wake-up, see holdRecords), the waiting
// count, the queued audit entries, the inbox update and the claims to
// read back.
func (s *Service) lastSave(ss *session, res *graph.Result[agent.State]) *LastSave {
	planned, waiting := s.planNext(res)
	wake := planned
	if s.opts.Schedule {
		if at := s.opts.Now().Add(redeliverAfter); wake.IsZero() || at.Before(wake) {
			wake = at
		}
	}
	var audit []map[string]string
	if s.opts.Audit {
		audit = ss.peekAudit()
	}
	var inbox *InboxUpdate
	if s.opts.Inbox {
		inbox = &InboxUpdate{Thread: ss.thread, Waiting: s.inboxEntries(res), Decided: ss.decided}
	}
	return &LastSave{Closing: Closing{Thread: ss.thread, Token: ss.token, Answered: -1,
		Schedule: s.opts.Schedule, Wake: wake, Waiting: waiting, Audit: audit, Keys: closeKeys(res), Inbox: inbox},
		planned: planned}
}

// closeKeys are the claims read back when a session at res ends: the
// decisions on the calls that still wait, and their approvals.
func closeKeys(res *graph.Result[agent.State]) []string {
	if res == nil {
		return nil
	}
	var keys []string
	for _, c := range res.State.Waiting() {
		keys = append(keys, claimKey(c))
		if q := quorumKeys(c); len(q) > 0 {
			keys = append(keys, q[0]) // its approvals
		}
	}
	return keys
}

// heldElsewhere reports whether the card of c is the process's that
// saved the checkpoint this session resumed from to show (holdFor): c
// waited there too, and the checkpoint is recent.
func (s *Service) heldElsewhere(ss *session, c agent.Call) bool {
	from := ss.from
	if from == nil || from.Status() != graph.Paused || !s.opts.Now().Before(from.Checkpoint.Created.Add(holdFor)) {
		return false
	}
	return waitedIn(from, c)
}

// waitedIn reports whether c waited at res in the same decision round.
func waitedIn(res *graph.Result[agent.State], c agent.Call) bool {
	key := announceKey(c)
	return res.Status() == graph.Paused && slices.ContainsFunc(res.State.Waiting(), func(w agent.Call) bool { return announceKey(w) == key })
}

// mayBeShown reports whether the card of c may be in the thread already,
// unrecorded (Event.Again): c waited, in the same decision round, at the
// checkpoint the session resumed from or found paused, which whoever
// saved it showed then. A round the session's own run began has not been
// shown to anyone.
func (ss *session) mayBeShown(c agent.Call) bool {
	return ss.from != nil && waitedIn(ss.from, c) || ss.found != nil && waitedIn(ss.found, c)
}

// awaitCard waits, for a while, until the card of c, which the process
// that saved the paused checkpoint from may still be showing, is recorded
// as shown — when the card has news to show: approvals, or an edit's
// reset. That process let go of the lease before it posted the card, so
// an approval can reach another process first: rather than post a second
// card, or leave the count to the recovery wake-up, the session waits for
// the record, then updates the card. It reports whether the record came
// (ss.claims then holds it). The wait ends by the hold's end (holdFor),
// so that a card whose process died is shown on time.
func (s *Service) awaitCard(ctx context.Context, ss *session, from *graph.Result[agent.State], st *agent.State, c agent.Call) bool {
	if !s.gate(st, c, ss.claims).HasNews(c) {
		return false
	}
	key := announceKey(c)
	deadline := from.Checkpoint.Created.Add(min(recordAfterNow()+answerWait, holdFor))
	if !s.opts.Now().Before(deadline) {
		return false
	}
	s.log.WithFields(logrus.Fields{"thread": ss.thread, "call": c.Key}).Info("waiting for the card to be recorded by the process showing it")
	giveUp := time.Now().Add(holdFor) // also by the real clock: a test's may stand still
	for s.opts.Now().Before(deadline) && time.Now().Before(giveUp) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
		s.overlayRecords(ss) // shown by this process, not yet written
		if _, ok := ss.claims[key]; ok {
			return true
		}
		got, err := s.store.ClaimValues(ctx, ss.thread, []string{key})
		if err != nil {
			return false
		}
		if v, ok := got[key]; ok {
			ss.claims[key] = v
			return true
		}
	}
	return false
}

// answerWait bounds how long a new turn waits for the answer of the run
// before it to be recorded as shown (awaitShown).
const answerWait = 10 * time.Second

// awaitShown waits, for a while, until the answer that ended the thread's
// last run is recorded as shown, when that run saved it a moment ago —
// in another process, which may still be showing it (its last save let go
// of the lease before it showed anything): so that the new turn does not
// show it again. Should that process have died, the new turn shows it
// once the wait is over. The session's claims are brought up to date.
func (s *Service) awaitShown(ctx context.Context, ss *session) {
	cached, ok := s.graph.Cached(ss.thread)
	if !ok || cached.Status() != graph.Done || (ss.head != "" && cached.Checkpoint.ID != ss.head) {
		return
	}
	deadline := cached.Checkpoint.Created.Add(recordAfterNow() + answerWait)
	for {
		// No count yet: a new thread's first run (a thread of before
		// the count is older than the wait).
		from := 0
		if v, ok := ss.claims[answeredKey]; ok {
			from, _ = strconv.Atoi(string(v))
		}
		if !hasAnswer(&cached.State, from) || !s.opts.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		got, err := s.store.ClaimValues(ctx, ss.thread, []string{answeredKey})
		if err != nil {
			return
		}
		if v, ok := got[answeredKey]; ok {
			ss.claims[answeredKey] = v
		}
	}
}

func recordAfterNow() time.Duration { return time.Duration(recordAfter.Load()) }

// hasAnswer reports whether st holds an answer at message from or after.
func hasAnswer(st *agent.State, from int) bool {
	for i := max(from, 0); i < len(st.Messages); i++ {
		if m := st.Messages[i]; m.Role == llm.RoleAssistant && len(m.ToolCalls) == 0 && m.Content != "" {
			return true
		}
	}
	return false
}
