package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// MemoryOptions configures a MemoryStore.
type MemoryOptions struct {
	// HistoryLimit is how many checkpoints per thread History returns and
	// the store keeps. Zero or less means 50.
	HistoryLimit int
}

// MemoryStore is a Store that keeps checkpoints in the process's memory.
// It is meant for tests, the offline demo and single-process tools: its
// data is lost when the process exits, and threads never expire.
//
// It keeps checkpoints as JSON, the way a persistent store does, so a
// checkpoint that survives a MemoryStore also survives Redis: fields without
// JSON names are dropped here too, and no caller can alias stored data.
// It is safe for concurrent use.
type MemoryStore struct {
	historyLimit int

	mu      sync.Mutex
	threads map[string]*memThread
}

// memThread is one thread's stored data.
type memThread struct {
	seq     int64
	journal [][]byte
	// history holds checkpoint JSON without journals, newest first. The
	// head is history[0].
	history [][]byte
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	if opts.HistoryLimit <= 0 {
		opts.HistoryLimit = 50
	}
	return &MemoryStore{historyLimit: opts.HistoryLimit, threads: make(map[string]*memThread)}
}

// Load returns the thread's latest checkpoint with its whole journal, or
// ErrNoCheckpoint.
func (s *MemoryStore) Load(ctx context.Context, thread string) (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	th, ok := s.threads[thread]
	if !ok {
		return nil, fmt.Errorf("load checkpoint %s: %w", thread, ErrNoCheckpoint)
	}
	cp, err := memDecode(th.history[0])
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", thread, err)
	}
	cp.Journal = memCloneJournal(th.journal)
	return cp, nil
}

// Save makes cp the thread's latest checkpoint if cp.Seq and cp.JournalFrom
// match the stored head, and returns ErrConflict having written nothing if
// they do not.
func (s *MemoryStore) Save(ctx context.Context, cp *Checkpoint) error {
	if err := memCheckSave(cp); err != nil {
		return err
	}
	meta, err := memEncode(cp)
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", cp.Thread, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	th := s.threads[cp.Thread]
	if th == nil {
		th = &memThread{}
	}
	if th.seq != cp.Seq-1 || len(th.journal) != cp.JournalFrom {
		return fmt.Errorf("save checkpoint %s seq %d: %w", cp.Thread, cp.Seq, ErrConflict)
	}
	for _, e := range cp.Journal {
		th.journal = append(th.journal, bytes.Clone(e))
	}
	th.seq = cp.Seq
	th.history = append([][]byte{meta}, th.history[:min(len(th.history), s.historyLimit-1)]...)
	s.threads[cp.Thread] = th
	return nil
}

// History returns up to the store's history limit of the thread's
// checkpoints, newest first, without journals.
func (s *MemoryStore) History(ctx context.Context, thread string) ([]*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	th, ok := s.threads[thread]
	if !ok {
		return nil, fmt.Errorf("checkpoint history %s: %w", thread, ErrNoCheckpoint)
	}
	cps := make([]*Checkpoint, 0, len(th.history))
	for _, b := range th.history {
		cp, err := memDecode(b)
		if err != nil {
			return nil, fmt.Errorf("checkpoint history %s: %w", thread, err)
		}
		cps = append(cps, cp)
	}
	return cps, nil
}

// Journal returns the thread's first n journal entries (all of them if the
// journal is shorter), or ErrNoCheckpoint.
func (s *MemoryStore) Journal(ctx context.Context, thread string, n int) ([]json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	th, ok := s.threads[thread]
	if !ok {
		return nil, fmt.Errorf("journal %s: %w", thread, ErrNoCheckpoint)
	}
	return memCloneJournal(th.journal[:max(0, min(n, len(th.journal)))]), nil
}

// memCheckSave reports a checkpoint that cannot be saved because it
// contradicts itself: no thread, a Seq below 1, or a journal slice that is
// not entries [JournalFrom, JournalLen).
func memCheckSave(cp *Checkpoint) error {
	switch {
	case cp == nil:
		return errors.New("save checkpoint: nil checkpoint")
	case cp.Thread == "":
		return fmt.Errorf("save checkpoint: no thread")
	case cp.Seq < 1:
		return fmt.Errorf("save checkpoint %s: seq %d is below 1", cp.Thread, cp.Seq)
	case cp.JournalFrom < 0 || len(cp.Journal) != cp.JournalLen-cp.JournalFrom:
		return fmt.Errorf("save checkpoint %s: journal carries %d entries, want [%d, %d)",
			cp.Thread, len(cp.Journal), cp.JournalFrom, cp.JournalLen)
	}
	return nil
}

// memEncode returns cp's JSON without its journal, the form stores
// keep a head and its history in.
func memEncode(cp *Checkpoint) ([]byte, error) {
	return json.Marshal(cp)
}

// memDecode reads what memEncode wrote.
func memDecode(b []byte) (*Checkpoint, error) {
	cp := new(Checkpoint)
	if err := json.Unmarshal(b, cp); err != nil {
		return nil, fmt.Errorf("decode checkpoint: %w", err)
	}
	return cp, nil
}

func memCloneJournal(entries [][]byte) []json.RawMessage {
	out := make([]json.RawMessage, len(entries))
	for i, e := range entries {
		out[i] = bytes.Clone(e)
	}
	return out
}
