package graph

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// TailLoader is a Store that can load only what a reader has not seen. The
// engine uses it, when the store has it, for threads whose state it keeps
// in memory.
type TailLoader interface {
	// LoadTail returns the thread's latest checkpoint like Load, but
	// without what a reader that saw checkpoint id (with seq and a journal
	// of from entries) has: nil and no error if that checkpoint is still
	// the latest; otherwise the latest with journal entries from
	// JournalFrom = from on, or, if the stored journal is shorter than
	// from, with all of them (JournalFrom 0). ErrNoCheckpoint if the
	// thread has none.
	LoadTail(ctx context.Context, thread, id string, seq int64, from int) (*Checkpoint, error)
}

// journalSharer is implemented (on the pointer) by Journaled states whose
// decoded journal entries are never changed once added, so that states
// can share them: ShareJournal makes the state's journal from's, without
// copying or decoding it.
type journalSharer[S any] interface {
	ShareJournal(from *S)
}

// journalTaker is implemented (on the pointer) by journalSharers whose
// journal may have room after its entries (a slice's capacity):
// TakeJournal makes the state's journal from's, room included, so that
// the state appends to it in place. Only one state may append there:
// the cache hands a thread's room to one run at a time (see cached).
type journalTaker[S any] interface {
	TakeJournal(from *S)
}

// journalAppender is implemented (on the pointer) by Journaled states
// that can decode entries onto the end of their journal.
type journalAppender interface {
	AppendJournal(entries []json.RawMessage) error
}

// stateCache keeps the decoded state of recently saved or loaded
// threads, least recently used out first. It is safe for concurrent use.
type stateCache[S any] struct {
	limit int
	mu    sync.Mutex
	lru   *list.List // of *cached[S], most recent first
	byKey map[string]*list.Element
}

// cached is a thread's checkpoint (with its state's JSON) and a state that
// holds its decoded journal; neither is changed once cached. view is the
// whole state, decoded once for Cached's readers.
//
// room says that the journal's room (see journalTaker) is free: the run
// that cached it has ended, and appends nothing more. The first run that
// starts from the entry takes it, and appends to the journal without
// copying it; every other state made from the entry has a journal
// without room, which copies itself on its first append. A long
// conversation is then not copied at every step of its thread.
type cached[S any] struct {
	thread string
	cp     *Checkpoint
	state  *S // &kept: one allocation with the entry
	kept   S
	room   atomic.Bool

	once sync.Once
	view *Result[S]
}

func newStateCache[S any](limit int) *stateCache[S] {
	if limit == 0 {
		limit = 256
	}
	if limit < 0 {
		return nil
	}
	var s S
	if _, ok := any(&s).(Journaled); ok {
		if _, ok := any(&s).(journalSharer[S]); !ok {
			return nil // decoding from the cache would cost what loading does
		}
	}
	return &stateCache[S]{limit: limit, lru: list.New(), byKey: map[string]*list.Element{}}
}

func (c *stateCache[S]) get(thread string) *cached[S] {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[thread]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(e)
	return e.Value.(*cached[S])
}

// put caches a copy of state at cp, which it keeps as it is: cp is a
// run's saved checkpoint, which nothing changes (setSaved replaces it),
// without a journal. The state's journal is shared, not copied: the
// journal is append-only, so what is cached stays as it was. ended says
// that the run that put it appends nothing more to the journal: its room
// is free for the next run.
func (c *stateCache[S]) put(cp *Checkpoint, state *S, ended bool) {
	if c == nil {
		return
	}
	entry := &cached[S]{thread: cp.Thread, cp: cp}
	kept := &entry.kept // only its journal is kept: the rest is cp.State
	entry.state = kept
	if t, ok := any(kept).(journalTaker[S]); ok && ended {
		t.TakeJournal(state)
		entry.room.Store(true)
	} else if j, ok := any(kept).(journalSharer[S]); ok {
		j.ShareJournal(state)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[cp.Thread]; ok {
		e.Value = entry
		c.lru.MoveToFront(e)
		return
	}
	c.byKey[cp.Thread] = c.lru.PushFront(entry)
	for c.lru.Len() > c.limit {
		last := c.lru.Back()
		c.lru.Remove(last)
		delete(c.byKey, last.Value.(*cached[S]).thread)
	}
}

func (c *stateCache[S]) drop(thread string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[thread]; ok {
		c.lru.Remove(e)
		delete(c.byKey, thread)
	}
}

// fromCache returns a run of the thread at its cached checkpoint, with a
// state of its own, without loading anything; nil if it is not cached.
func (g *Graph[S]) fromCache(thread string) *run[S] {
	c := g.cache.get(thread)
	if c == nil {
		return nil
	}
	r := g.topRun(thread)
	if err := r.decodeFrom(c, c.cp, nil, true); err != nil {
		g.cache.drop(thread)
		return nil
	}
	return r
}

// loadTail is load for a cached thread whose store is a TailLoader: it
// reads only what changed since the cached checkpoint. ok is false when
// it cannot be used.
func (g *Graph[S]) loadTail(ctx context.Context, thread string) (r *run[S], ok bool, err error) {
	tl, isTail := g.store.(TailLoader)
	c := g.cache.get(thread)
	if !isTail || c == nil {
		return nil, false, nil
	}
	cp, err := tl.LoadTail(ctx, thread, c.cp.ID, c.cp.Seq, c.cp.JournalLen)
	if err != nil {
		if errors.Is(err, ErrNoCheckpoint) {
			g.cache.drop(thread)
		}
		return nil, true, err
	}
	r = g.topRun(thread)
	if cp == nil { // unchanged
		return r, true, r.decodeFrom(c, c.cp, nil, true)
	}
	if err := upgrade(cp); err != nil {
		return nil, true, err
	}
	if cp.JournalFrom != c.cp.JournalLen {
		return r, true, r.decode(cp)
	}
	return r, true, r.decodeFrom(c, cp, cp.Journal, false)
}

// decodeFrom makes the run's state the cached one's journal followed by
// tail, with the rest of the state decoded from cp. With take, the run
// takes the journal's room if it is free: only a run that goes on to
// change the state may ask for it. r is a new run (topRun), whose state
// is decoded in place; a run whose decode fails is dropped.
func (r *run[S]) decodeFrom(c *cached[S], cp *Checkpoint, tail []json.RawMessage, take bool) error {
	s := &r.state
	if err := decodeStateJSON(cp.State, s); err != nil {
		return fmt.Errorf("decode state of checkpoint %s: %w", cp.ID, err)
	}
	if j, ok := any(s).(journalSharer[S]); ok {
		if t, ok := any(s).(journalTaker[S]); ok && take && c.room.CompareAndSwap(true, false) {
			t.TakeJournal(c.state)
		} else {
			j.ShareJournal(c.state)
		}
		if len(tail) > 0 {
			a, ok := any(s).(journalAppender)
			if !ok {
				return fmt.Errorf("decode checkpoint %s: the state cannot append journal entries", cp.ID)
			}
			if err := a.AppendJournal(tail); err != nil {
				return fmt.Errorf("decode journal of checkpoint %s: %w", cp.ID, err)
			}
		}
		if n := any(s).(Journaled).JournalLen(); n != cp.JournalLen {
			return fmt.Errorf("decode checkpoint %s: journal has %d of %d entries", cp.ID, n, cp.JournalLen)
		}
	}
	if cp == c.cp {
		r.keepSaved(cp) // the cache's, which nothing changes: shared
	} else {
		r.setSaved(cp)
	}
	return nil
}

// Cached returns the thread's latest state as this process last saved or
// loaded it, without reading the store, and whether it has it. Another
// process may have written since: use it only where something checks
// that later (a save's compare-and-set, a claim that checks the head's
// ID), or to guess what to read.
//
// The state is decoded once per cached checkpoint and shared by every
// caller until the thread is saved or loaded again: the caller reads it
// and changes nothing in it, its slices, maps and pointers included (the
// Result itself is the caller's own). A run that changes the state
// begins from a copy of its own (Resume, Continue).
func (g *Graph[S]) Cached(thread string) (*Result[S], bool) {
	c := g.cache.get(thread)
	if c == nil {
		return nil, false
	}
	c.once.Do(func() {
		r := g.topRun(thread)
		if err := r.decodeFrom(c, c.cp, nil, false); err == nil {
			c.view = r.result()
		}
	})
	if c.view == nil {
		g.cache.drop(thread)
		return nil, false
	}
	res := *c.view
	return &res, true
}
