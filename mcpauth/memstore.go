package mcpauth

import (
	"context"
	"slices"
	"sync"
	"time"
)

// MemStore is a Store in memory, for one process: the command-line
// clients that make a connection and use it at once, and tests. It is
// safe for concurrent use.
type MemStore struct {
	mu     sync.Mutex
	conns  map[Identity][]byte
	states map[string]memState
	boxes  map[string]chan []byte
}

type memState struct {
	rec     []byte
	expires time.Time
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{conns: map[Identity][]byte{}, states: map[string]memState{}, boxes: map[string]chan []byte{}}
}

// PutConnection implements Store.
func (m *MemStore) PutConnection(_ context.Context, server, user string, sealed []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.conns[Identity{server, user}] = slices.Clone(sealed)
	return nil
}

// Connection implements Store.
func (m *MemStore) Connection(_ context.Context, server, user string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.conns[Identity{server, user}]), nil
}

// DeleteConnection implements Store.
func (m *MemStore) DeleteConnection(_ context.Context, server, user string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.conns[Identity{server, user}]
	delete(m.conns, Identity{server, user})
	return ok, nil
}

// Connections implements Store.
func (m *MemStore) Connections(_ context.Context, server string) ([]Identity, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Identity
	for id := range m.conns {
		if server == "" || id.Server == server {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b Identity) int {
		if a.Server != b.Server {
			return compareStrings(a.Server, b.Server)
		}
		return compareStrings(a.User, b.User)
	})
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// PutAuthState implements Store.
func (m *MemStore) PutAuthState(_ context.Context, state string, rec []byte, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states[state] = memState{rec: slices.Clone(rec), expires: time.Now().Add(ttl)}
	return nil
}

// TakeAuthState implements Store.
func (m *MemStore) TakeAuthState(_ context.Context, state string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.states[state]
	delete(m.states, state)
	if !ok || time.Now().After(st.expires) {
		return nil, nil
	}
	return st.rec, nil
}

func (m *MemStore) box(name string) chan []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.boxes[name]
	if !ok {
		b = make(chan []byte, 1)
		m.boxes[name] = b
	}
	return b
}

// Deliver implements Store; a second value for the same box is dropped.
func (m *MemStore) Deliver(_ context.Context, name string, value []byte, _ time.Duration) error {
	select {
	case m.box(name) <- slices.Clone(value):
	default:
	}
	return nil
}

// Receive implements Store.
func (m *MemStore) Receive(ctx context.Context, name string) ([]byte, error) {
	select {
	case v := <-m.box(name):
		return v, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
