package runner

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// MemoryStore keeps claims, approvals, leases, the schedule, the inbox
// and the audit trail in memory, for tests and single-process use: it
// implements Store, Schedule, Inbox and Auditor. It is safe for concurrent use within one process; nothing
// survives the process. Leases expire by the clock given to it.
type MemoryStore struct {
	now func() time.Time

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

var errEmptyLeaseOwner = errors.New("empty lease owner")

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

// Claim implements Claims.
func (m *MemoryStore) Claim(_ context.Context, thread, key string, value []byte) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
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
	c := m.claims[thread]
	if c == nil {
		c = map[string][]byte{}
		m.claims[thread] = c
	}
	list := c[a.Set]
	if v, ok := c[a.Key]; ok {
		return Approved{Winner: slices.Clone(v), Approvals: slices.Clone(list)}, nil
	}
	if bytes.Contains(append([]byte("\n"), list...), []byte("\n"+a.By+"\t")) {
		return Approved{Approvals: slices.Clone(list)}, nil
	}
	list = slices.Concat(list, []byte(a.By+"\t"), a.Entry, []byte("\n"))
	c[a.Set] = list
	out := Approved{Recorded: true, Approvals: slices.Clone(list)}
	if bytes.Count(list, []byte("\n")) >= a.Required {
		v := slices.Concat(a.Value, []byte("\n"), list)
		c[a.Key] = v
		out.Won, out.Winner = true, slices.Clone(v)
	}
	return out, nil
}

// AcquireLease implements Leases: the acquisition's token is
// NewLeaseToken(owner).
func (m *MemoryStore) AcquireLease(_ context.Context, thread, owner string, ttl time.Duration) (string, error) {
	if owner == "" {
		return "", errEmptyLeaseOwner
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.leases[thread]; ok && m.now().Before(l.expires) {
		return "", nil
	}
	token := NewLeaseToken(owner)
	m.leases[thread] = memLease{token: token, expires: m.now().Add(ttl)}
	return token, nil
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
	if l, ok := m.leases[thread]; ok && token != "" && l.token == token {
		delete(m.leases, thread)
	}
	return nil
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
	if cur, ok := m.wakeups[thread]; !ok || at.Before(cur) {
		m.wakeups[thread] = at
	}
	return nil
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
	if n <= 0 {
		delete(m.waiting, thread)
	} else {
		m.waiting[thread] = n
	}
	return nil
}

// Audit implements Auditor.
func (m *MemoryStore) Audit(_ context.Context, fields map[string]string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := make(map[string]string, len(fields))
	for k, v := range fields {
		rec[k] = v
	}
	m.audit = append(m.audit, rec)
	return nil
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
	return nil
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
