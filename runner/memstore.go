package runner

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/countersign/countersign/graph"
)

var _ Store = (*MemoryStore)(nil)

// MemoryStore keeps claims, approvals, leases, the schedule, the inbox
// and the audit trail in memory, for tests and single-process use: it
// implements Store, each session's step under one lock as redisstore does
// in one script. It is safe for concurrent use within one process;
// nothing survives the process. Leases expire by the clock given to it.
//
// It keeps no checkpoints: given the graph's store (WithCheckpoints), it
// reads the head's ID from it, to tell sessions the head and to refuse a
// stale claim (ErrStale); without it the head is unknown ("": the service
// then reads the state) and ExpectHead is not checked.
type MemoryStore struct {
	now         func() time.Time
	checkpoints graph.Store

	mu      sync.Mutex
	claims  map[string]map[string][]byte
	leases  map[string]memLease
	wakeups map[string]time.Time
	waiting map[string]int
	audit   []map[string]string
	inbox   map[string][]InboxEntry
	recent  map[string][]DecisionRecord
}

type memLease struct {
	token   string
	expires time.Time
}

var (
	errEmptyLeaseOwner = errors.New("empty lease owner")
	errNoThread        = errors.New("no thread named")
)

// NewMemoryStore returns an empty store; now is its clock (default
// time.Now).
func NewMemoryStore(now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{
		now: now, claims: map[string]map[string][]byte{}, leases: map[string]memLease{},
		wakeups: map[string]time.Time{}, waiting: map[string]int{},
		inbox: map[string][]InboxEntry{}, recent: map[string][]DecisionRecord{},
	}
}

// WithCheckpoints makes the store read the thread's head checkpoint from
// cps, the graph's store, and returns it.
func (m *MemoryStore) WithCheckpoints(cps graph.Store) *MemoryStore {
	m.checkpoints = cps
	return m
}

// Claim implements Claims.
func (m *MemoryStore) Claim(_ context.Context, thread, key string, value []byte) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claim(thread, key, value)
}

func (m *MemoryStore) claim(thread, key string, value []byte) ([]byte, bool, error) {
	c := m.claims[thread]
	if c == nil {
		c = map[string][]byte{}
		m.claims[thread] = c
	}
	if v, ok := c[key]; ok {
		return slices.Clone(v), false, nil
	}
	c[key] = slices.Clone(value)
	return slices.Clone(value), true, nil
}

// Claims implements Claims.
func (m *MemoryStore) Claims(_ context.Context, thread string) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]byte, len(m.claims[thread]))
	for k, v := range m.claims[thread] {
		out[k] = slices.Clone(v)
	}
	return out, nil
}

// Approve implements Approvals.
func (m *MemoryStore) Approve(_ context.Context, thread string, a Approval) (Approved, error) {
	if err := CheckApproval(a); err != nil {
		return Approved{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.approve(thread, a), nil
}

func (m *MemoryStore) approve(thread string, a Approval) Approved {
	c := m.claims[thread]
	if c == nil {
		c = map[string][]byte{}
		m.claims[thread] = c
	}
	list := c[a.Set]
	if v, ok := c[a.Key]; ok {
		return Approved{Winner: slices.Clone(v), Approvals: slices.Clone(list)}
	}
	if bytes.Contains(append([]byte("\n"), list...), []byte("\n"+a.By+"\t")) {
		return Approved{Approvals: slices.Clone(list)}
	}
	list = slices.Concat(list, []byte(a.By+"\t"), a.Entry, []byte("\n"))
	c[a.Set] = list
	out := Approved{Recorded: true, Approvals: slices.Clone(list)}
	if bytes.Count(list, []byte("\n")) >= a.Required {
		v := slices.Concat(a.Value, []byte("\n"), list)
		c[a.Key] = v
		out.Won, out.Winner = true, slices.Clone(v)
	}
	return out
}

// AcquireLease implements Leases: the acquisition's token is
// NewLeaseToken(owner).
func (m *MemoryStore) AcquireLease(_ context.Context, thread, owner string, ttl time.Duration) (string, error) {
	if owner == "" {
		return "", errEmptyLeaseOwner
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acquire(thread, owner, ttl), nil
}

func (m *MemoryStore) acquire(thread, owner string, ttl time.Duration) string {
	if l, ok := m.leases[thread]; ok && m.now().Before(l.expires) {
		return ""
	}
	token := NewLeaseToken(owner)
	m.leases[thread] = memLease{token: token, expires: m.now().Add(ttl)}
	return token
}

// RenewLease implements Leases.
func (m *MemoryStore) RenewLease(_ context.Context, thread, token string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[thread]
	if !ok || token == "" || l.token != token || !m.now().Before(l.expires) {
		return false, nil
	}
	m.leases[thread] = memLease{token: token, expires: m.now().Add(ttl)}
	return true, nil
}

// ReleaseLease implements Leases.
func (m *MemoryStore) ReleaseLease(_ context.Context, thread, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.release(thread, token)
	return nil
}

// release lets go of the lease if token names it.
func (m *MemoryStore) release(thread, token string) {
	if l, ok := m.leases[thread]; ok && token != "" && l.token == token {
		delete(m.leases, thread)
	}
}

// Wake implements Schedule.
func (m *MemoryStore) Wake(_ context.Context, thread string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wakeups[thread] = at
	return nil
}

// WakeBy implements Schedule.
func (m *MemoryStore) WakeBy(_ context.Context, thread string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wakeBy(thread, at)
	return nil
}

func (m *MemoryStore) wakeBy(thread string, at time.Time) {
	if at.IsZero() {
		return
	}
	if cur, ok := m.wakeups[thread]; !ok || at.Before(cur) {
		m.wakeups[thread] = at
	}
}

// Due implements Schedule.
func (m *MemoryStore) Due(_ context.Context, now time.Time, n int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var due []string
	for thread, at := range m.wakeups {
		if !at.After(now) {
			due = append(due, thread)
		}
	}
	slices.SortFunc(due, func(a, b string) int { return m.wakeups[a].Compare(m.wakeups[b]) })
	if len(due) > n {
		due = due[:n]
	}
	return due, nil
}

// Forget implements Schedule.
func (m *MemoryStore) Forget(_ context.Context, thread string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.wakeups, thread)
	return nil
}

// SetWaiting implements Schedule.
func (m *MemoryStore) SetWaiting(_ context.Context, thread string, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setWaiting(thread, n)
	return nil
}

func (m *MemoryStore) setWaiting(thread string, n int) {
	if n <= 0 {
		delete(m.waiting, thread)
	} else {
		m.waiting[thread] = n
	}
}

// Audit implements Auditor.
func (m *MemoryStore) Audit(_ context.Context, fields map[string]string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.appendAudit(fields)
	return nil
}

// AuditAll implements Auditor.
func (m *MemoryStore) AuditAll(_ context.Context, records []map[string]string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.appendAudit(records...)
	return nil
}

func (m *MemoryStore) appendAudit(records ...map[string]string) {
	for _, fields := range records {
		rec := make(map[string]string, len(fields))
		for k, v := range fields {
			rec[k] = v
		}
		m.audit = append(m.audit, rec)
	}
}

// AuditLog returns the newest n audit records, newest first.
func (m *MemoryStore) AuditLog(_ context.Context, n int) ([]map[string]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []map[string]string
	for i := len(m.audit) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, m.audit[i])
	}
	return out, nil
}

// UpdateInbox implements Inbox.
func (m *MemoryStore) UpdateInbox(_ context.Context, u *InboxUpdate) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updateInbox(u)
	return nil
}

func (m *MemoryStore) updateInbox(u *InboxUpdate) {
	u.Replaced = slices.Clone(m.inbox[u.Thread])
	if len(u.Waiting) == 0 {
		delete(m.inbox, u.Thread)
	} else {
		m.inbox[u.Thread] = slices.Clone(u.Waiting)
	}
	for _, d := range u.Decided {
		list := append([]DecisionRecord{d}, m.recent[d.By]...)
		m.recent[d.By] = list[:min(len(list), RecentLimit)]
	}
}

// InboxEntries implements Inbox.
func (m *MemoryStore) InboxEntries(context.Context) ([]InboxEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []InboxEntry
	for _, entries := range m.inbox {
		out = append(out, entries...)
	}
	return out, nil
}

// RecentDecisions implements Inbox.
func (m *MemoryStore) RecentDecisions(_ context.Context, user string, n int) ([]DecisionRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.recent[user]
	return slices.Clone(list[:min(len(list), max(n, 0))]), nil
}

// head returns the ID of the thread's head checkpoint, "" if it has none
// or the store was given no checkpoints.
func (m *MemoryStore) head(ctx context.Context, thread string) (string, error) {
	if m.checkpoints == nil {
		return "", nil
	}
	cp, err := m.checkpoints.Load(ctx, thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return cp.ID, nil
}

// values returns the thread's claims of keys that are set.
func (m *MemoryStore) values(thread string, keys []string) map[string][]byte {
	out := make(map[string][]byte, len(keys))
	for _, k := range keys {
		if v, ok := m.claims[thread][k]; ok {
			out[k] = slices.Clone(v)
		}
	}
	return out
}

// ClaimValues implements Sessions.
func (m *MemoryStore) ClaimValues(_ context.Context, thread string, keys []string) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.values(thread, keys), nil
}

// OpenThread implements Sessions.
func (m *MemoryStore) OpenThread(ctx context.Context, o Opening) (Opened, error) {
	if o.Owner == "" {
		return Opened{}, errEmptyLeaseOwner
	}
	head, err := m.head(ctx, o.Thread)
	if err != nil {
		return Opened{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.record(o.Thread, o.Record, o.Answered)
	out := Opened{Head: head, Token: m.acquire(o.Thread, o.Owner, o.TTL)}
	out.Held = out.Token != ""
	if out.Held {
		m.wakeBy(o.Thread, o.WakeIfHeld)
	} else {
		m.wakeBy(o.Thread, o.WakeIfBusy)
	}
	out.Claims = m.values(o.Thread, o.Keys)
	return out, nil
}

// CloseThread implements Sessions.
func (m *MemoryStore) CloseThread(_ context.Context, c Closing) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := false
	if l, ok := m.leases[c.Thread]; ok && c.Token != "" && l.token == c.Token && m.now().Before(l.expires) {
		held = true
	}
	m.record(c.Thread, c.Record, max(c.Answered, 0))
	if c.Answered == 0 {
		m.raiseAnswered(c.Thread, 0)
	}
	if held && c.Schedule {
		if c.Wake.IsZero() {
			delete(m.wakeups, c.Thread)
		} else {
			m.wakeups[c.Thread] = c.Wake
		}
		m.setWaiting(c.Thread, c.Waiting)
	}
	m.appendAudit(c.Audit...)
	if c.Inbox != nil {
		m.updateInbox(c.Inbox)
	}
	if held {
		m.release(c.Thread, c.Token)
	}
	return m.values(c.Thread, c.Keys), nil
}

// record writes deliveries: set-once records, and the answered count
// raised to answered if that is above 0. The caller holds m.mu.
func (m *MemoryStore) record(thread string, keys []string, answered int) {
	for _, key := range keys {
		_, _, _ = m.claim(thread, key, []byte("1"))
	}
	if answered > 0 {
		m.raiseAnswered(thread, answered)
	}
}

func (m *MemoryStore) raiseAnswered(thread string, n int) {
	cur := -1
	if v, ok := m.claims[thread][answeredKey]; ok {
		cur, _ = strconv.Atoi(string(v))
	}
	if cur < n {
		_, _, _ = m.claim(thread, answeredKey, nil) // makes the thread's map
		m.claims[thread][answeredKey] = []byte(strconv.Itoa(n))
	}
}

// RecordDeliveries implements Sessions. A delivery of no thread fails
// alone, as it does in redisstore.
func (m *MemoryStore) RecordDeliveries(_ context.Context, ds []Deliveries) []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for i, d := range ds {
		if d.Thread == "" {
			if errs == nil {
				errs = make([]error, len(ds))
			}
			errs[i] = errNoThread
			continue
		}
		m.record(d.Thread, d.Record, d.Answered)
		if at, ok := m.wakeups[d.Thread]; d.Move && ok && at.Equal(d.WakeSet) {
			if d.Wake.IsZero() {
				delete(m.wakeups, d.Thread)
			} else {
				m.wakeups[d.Thread] = d.Wake
			}
		}
	}
	return errs
}

// ClaimsWithSaves implements Sessions: the store keeps no checkpoints,
// so a decision is claimed on its own, before the run that applies it.
func (m *MemoryStore) ClaimsWithSaves() bool { return false }

// ClaimDecision implements Sessions.
func (m *MemoryStore) ClaimDecision(ctx context.Context, c DecisionClaim) (Claimed, error) {
	head, err := m.head(ctx, c.Thread)
	if err != nil {
		return Claimed{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.ExpectHead != "" && m.checkpoints != nil && head != c.ExpectHead {
		return Claimed{}, ErrStale
	}
	m.record(c.Thread, c.Record, c.Answered)
	m.wakeBy(c.Thread, c.WakeBy)
	winner, won, _ := m.claim(c.Thread, c.Key, c.Value)
	out := Claimed{Winner: winner, Won: won}
	if !won {
		return out, nil
	}
	if c.Audit != nil {
		m.appendAudit(c.Audit)
	}
	if c.LeaseOwner != "" && c.LeaseTTL >= time.Millisecond {
		if out.Token = m.acquire(c.Thread, c.LeaseOwner, c.LeaseTTL); out.Token != "" {
			out.Leased, out.Head, out.Claims = true, head, m.values(c.Thread, c.Keys)
		}
	}
	return out, nil
}

// ClaimApproval implements Sessions.
func (m *MemoryStore) ClaimApproval(ctx context.Context, c ApprovalClaim) (ApprovalClaimed, error) {
	if err := CheckApproval(c.Approval); err != nil {
		return ApprovalClaimed{}, err
	}
	head, err := m.head(ctx, c.Thread)
	if err != nil {
		return ApprovalClaimed{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.ExpectHead != "" && m.checkpoints != nil && head != c.ExpectHead {
		return ApprovalClaimed{}, ErrStale
	}
	m.wakeBy(c.Thread, c.WakeBy)
	out := ApprovalClaimed{Approved: m.approve(c.Thread, c.Approval)}
	if out.Recorded && c.LeaseOwner != "" && c.LeaseTTL >= time.Millisecond {
		if out.Token = m.acquire(c.Thread, c.LeaseOwner, c.LeaseTTL); out.Token != "" {
			out.Leased, out.Head, out.Claims = true, head, m.values(c.Thread, c.Keys)
		}
	}
	return out, nil
}

// KeepReply implements Sessions: the store keeps no checkpoints, so
// its saves take no lease (SavesTakeLease) and a start opens its thread
// first; a reply to a thread without a head waits for that lease.
func (m *MemoryStore) KeepReply(context.Context, string, []byte, time.Duration) (Kept, error) {
	return KeptNot, nil
}

// TakeBackReply implements Sessions: nothing was kept (KeepReply).
func (m *MemoryStore) TakeBackReply(context.Context, string, []byte) (bool, error) {
	return false, nil
}

// SavesTakeLease implements Sessions: false, the checkpoints are kept
// elsewhere.
func (m *MemoryStore) SavesTakeLease() bool { return false }
