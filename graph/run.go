package graph

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/interrupt"
)

// Journaled is implemented (on the pointer) by states that have an
// append-only part, such as a conversation's messages. Checkpoints store
// that part once per thread instead of rewriting it at every step, so a
// save costs what changed, not the conversation's length. The engine
// treats the journal as append-only: a state whose journal shrinks cannot
// be saved. The rest of the state is saved as its JSON encoding, so the
// journal's field should be tagged `json:"-"`.
type Journaled interface {
	// JournalLen returns the number of entries.
	JournalLen() int
	// MarshalJournal encodes entries [from, JournalLen()).
	MarshalJournal(from int) ([]json.RawMessage, error)
	// UnmarshalJournal replaces the journal with the decoded entries.
	UnmarshalJournal(entries []json.RawMessage) error
}

// StateEncoder is implemented (on the pointer) by states that write their
// own JSON: AppendJSON appends, byte for byte, what json.Marshal writes
// for the state. The engine encodes the state at every save; with it,
// that costs no reflection, and no second pass of encoding/json over the
// output of the state's MarshalJSON methods.
type StateEncoder interface {
	AppendJSON(b []byte) ([]byte, error)
}

// encodeState returns the state's JSON without its journal.
func encodeState[S any](s *S) ([]byte, error) {
	if e, ok := any(s).(StateEncoder); ok {
		return e.AppendJSON(make([]byte, 0, 512))
	}
	return json.Marshal(s)
}

// StateDecoder is implemented (on the pointer) by states that read their
// own JSON: DecodeJSON sets the state to what json.Unmarshal decodes from
// data into a zero state, or fails where it fails. The engine decodes
// the state at every start from a checkpoint; with it, without
// encoding/json's reflection and its check of the whole text first.
type StateDecoder interface {
	DecodeJSON(data []byte) error
}

// decodeStateJSON sets s, a zero state, from the state's JSON without its
// journal.
func decodeStateJSON[S any](data []byte, s *S) error {
	if d, ok := any(s).(StateDecoder); ok {
		return d.DecodeJSON(data)
	}
	return json.Unmarshal(data, s)
}

// Graph is a compiled graph. It is safe for concurrent use; runs of one
// thread must not overlap (the store's compare-and-set makes the loser of
// such a race fail with ErrConflict; callers keep a lease per thread).
type Graph[S any] struct {
	nodes      map[string]NodeFunc[S]
	edges      map[string][]string
	routes     map[string]route[S]
	joins      []join
	reducers   map[string]Reducer
	subs       map[string]subgraph[S]
	dependsOn  func(*S) []string
	fp         *Fingerprint
	store      Store
	before     []string
	after      []string
	now        func() time.Time
	newID      func() string
	mergeSaves bool
	cache      *stateCache[S]
	// stamps holds the fingerprints stamp made of at most one node and
	// one part (stampKey → *Fingerprint): those of almost every save,
	// made once each and shared, as fingerprints are never changed.
	stamps    sync.Map
	numStamps atomic.Int32
}

// Result is where a run stopped: done, paused, or failed.
type Result[S any] struct {
	// Checkpoint is the last checkpoint written.
	Checkpoint *Checkpoint
	// State is the state at that checkpoint.
	State S
}

// Status is the run's status at the last checkpoint.
func (r *Result[S]) Status() Status { return r.Checkpoint.Status }

// Interrupts are the pauses a paused run waits on.
func (r *Result[S]) Interrupts() []interrupt.Info { return r.Checkpoint.Interrupts }

// NodeError is a node's failure, as Run and Resume return it after saving
// the failed checkpoint.
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %s: %v", e.Node, e.Err) }
func (e *NodeError) Unwrap() error { return e.Err }

// IsFinal reports whether err says that running the node again cannot
// help: an error in its tree has a method Final() bool that returns true.
// The package that knows what went wrong marks it (a model's client, for
// a conversation too long for the model); the engine records it with the
// failure, as Checkpoint.Final.
func IsFinal(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case interface{ Final() bool }:
		if e.Final() {
			return true
		}
	}
	switch e := err.(type) {
	case interface{ Unwrap() error }:
		return IsFinal(e.Unwrap())
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(e.Unwrap(), IsFinal)
	}
	return false
}

// Start begins a new thread with state init. It fails with ErrThreadExists
// if the thread has a checkpoint already.
func (g *Graph[S]) Start(ctx context.Context, thread string, init S, cfg RunConfig) (*Result[S], error) {
	// No load first: the first save is a compare-and-set on a thread
	// without checkpoints, which refuses an existing thread.
	r := g.newRun(thread, init, cfg, nil)
	r.top = true
	next, err := g.successors(Start, &r.state)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", thread, err)
	}
	if err := r.firstSave(ctx, next, nil); err != nil {
		if errors.Is(err, ErrConflict) {
			err = ErrThreadExists
		}
		return nil, fmt.Errorf("start %s: %w", thread, err)
	}
	res, err := r.loop(ctx)
	if err != nil && r.saved.Seq == 0 && errors.Is(err, ErrConflict) {
		// The first write, merged into a later save, found the thread.
		return nil, fmt.Errorf("start %s: %w", thread, ErrThreadExists)
	}
	return res, err
}

// firstSave saves the checkpoint that begins a pass through the graph,
// with next as the nodes to run and edit's changes. With MergeSaves, when
// next is one node whose saves merge, it is staged instead: the pass's
// first save (the node's before a side effect, or the step's end) writes
// it, so a pass whose first step has no side effect costs no write of
// its own.
func (r *run[S]) firstSave(ctx context.Context, next []string, edit func(*Checkpoint)) error {
	at := func(cp *Checkpoint) {
		cp.Next = next
		if edit != nil {
			edit(cp)
		}
	}
	if len(next) != 1 || !r.merges(next[0]) {
		return r.save(ctx, Running, at)
	}
	// Should the pass fail before it writes, the failure is saved with
	// the state it began with: kept here, as the nodes change it in place.
	state, err := encodeState(&r.state)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	b := &begun{state: state}
	if j, ok := any(&r.state).(Journaled); ok {
		b.journalLen = j.JournalLen()
	}
	if err := r.stage(ctx, Running, at); err != nil {
		return err
	}
	b.cp = r.cp.Meta()
	b.cp.Next = slices.Clone(r.cp.Next)
	r.begun = b
	return nil
}

// newRun returns a run of a new thread that persists with persist (nil:
// to the store).
func (g *Graph[S]) newRun(thread string, init S, cfg RunConfig, persist func(context.Context, *Checkpoint) error) *run[S] {
	return &run[S]{g: g, thread: thread, state: init, cp: &Checkpoint{Thread: thread, Config: cfg}, persist: persist, saved: &Checkpoint{Thread: thread}}
}

// topRun returns an empty run of a thread of g itself (not of a subgraph
// node), which persists to the store and may use the cache.
func (g *Graph[S]) topRun(thread string) *run[S] {
	return &run[S]{g: g, thread: thread, top: true} // persists to the store
}

// Continue starts a new pass through the graph on a thread whose run is
// done, after mod has changed its state (for a conversation: a new user
// turn). It fails with ErrNotDone if the run has not finished, and with an
// *IncompatibleError if the state's format changed since it was saved.
func (g *Graph[S]) Continue(ctx context.Context, thread string, mod StateModifier[S]) (*Result[S], error) {
	r := g.fromCache(thread)
	res, err := g.continueRun(ctx, r, thread, mod)
	if r != nil && errors.Is(err, errStaleCache) {
		// The cached state was not the latest: start again from the
		// stored one. Nothing was written and no node ran.
		res, err = g.continueRun(ctx, nil, thread, mod)
	}
	if err != nil {
		return nil, fmt.Errorf("continue %s: %w", thread, err)
	}
	return res, nil
}

// errStaleCache: a run started from the cache lost its first save's
// compare-and-set before any node ran.
var errStaleCache = fmt.Errorf("%w: the cached state was not the latest", ErrConflict)

func (g *Graph[S]) continueRun(ctx context.Context, r *run[S], thread string, mod StateModifier[S]) (*Result[S], error) {
	fromCache := r != nil
	if r == nil {
		var err error
		if r, err = g.load(ctx, thread, "", false); err != nil {
			return nil, err
		}
	}
	if r.cp.Status != Done {
		if fromCache {
			return nil, errStaleCache // a stale cache cannot say the run is not done
		}
		return nil, fmt.Errorf("%w (status %s)", ErrNotDone, r.cp.Status)
	}
	if err := g.checkState(thread, r.cp.Fingerprint); err != nil {
		return nil, err
	}
	if err := mod(ctx, NodePath{Start}, &r.state); err != nil {
		return nil, fmt.Errorf("modify state: %w", err)
	}
	next, err := g.successors(Start, &r.state)
	if err != nil {
		return nil, err
	}
	staged := r.saved.Seq
	err = r.firstSave(ctx, next, func(cp *Checkpoint) { cp.Step++ })
	if fromCache && errors.Is(err, ErrConflict) {
		return nil, errStaleCache
	}
	if err != nil {
		return nil, err
	}
	res, err := r.loop(ctx)
	if fromCache && err != nil && r.saved.Seq == staged && errors.Is(err, ErrConflict) {
		// The first write, merged into a later save, found the cache
		// stale; what ran before it had no side effect.
		return nil, errStaleCache
	}
	return res, err
}

// Resume answers a paused (or failed) thread: mod changes the saved state,
// the change is saved, and the run goes on from the node that paused or
// failed. A thread that is not paused or failed gives ErrNotPaused; losing
// a race with another writer gives ErrConflict; a checkpoint written by an
// incompatible graph gives an *IncompatibleError. Either way nothing
// changes.
//
// Resume answers every interrupt the run waits on: mod is called once per
// paused node, with its path and the state that node paused with (its own
// copy in a step of several nodes). For a pause inside a subgraph, mod gets
// the full path and this graph's state; ResumeNested gives it the
// subgraph's state instead.
func (g *Graph[S]) Resume(ctx context.Context, thread string, mod StateModifier[S]) (*Result[S], error) {
	return g.resume(ctx, thread, "", nil, topModifier(mod))
}

// ResumeAt is Resume that also requires the thread's latest checkpoint to
// be checkpointID, so an answer to an old pause cannot be applied to a
// newer one; a stale checkpointID gives ErrConflict.
func (g *Graph[S]) ResumeAt(ctx context.Context, thread, checkpointID string, mod StateModifier[S]) (*Result[S], error) {
	return g.resume(ctx, thread, checkpointID, nil, topModifier(mod))
}

// Answer answers one interrupt of a paused thread, by its ID: mod is
// applied to the state of the node that paused there, that node runs again,
// and the run's other interrupts stay as they are (their nodes do not run
// again) until they are answered in turn. The run pauses again with the
// interrupts still open, under the same IDs. An ID the run does not wait
// on gives ErrNoInterrupt.
func (g *Graph[S]) Answer(ctx context.Context, thread, interruptID string, mod StateModifier[S]) (*Result[S], error) {
	return g.resume(ctx, thread, "", []string{interruptID}, topModifier(mod))
}

// ResumeNested answers the interrupts of a thread of g paused inside a
// subgraph whose state is T: mod gets each pause's full path and the
// subgraph's own state. interruptIDs names the interrupts to answer; none
// means all. A pause whose innermost state is not a T gives an error and
// changes nothing.
func ResumeNested[S, T any](ctx context.Context, g *Graph[S], thread string, mod StateModifier[T], interruptIDs ...string) (*Result[S], error) {
	m := &modifier{deep: true, fn: func(ctx context.Context, path NodePath, s any) error {
		t, ok := s.(*T)
		if !ok {
			return fmt.Errorf("the state paused at %s is a %T, not a %T", path, s, t)
		}
		return mod(ctx, path, t)
	}}
	return g.resume(ctx, thread, "", interruptIDs, m)
}

func (g *Graph[S]) resume(ctx context.Context, thread, checkpointID string, ids []string, mod *modifier) (*Result[S], error) {
	// Asked to resume the very checkpoint that is cached, start from the
	// cache: if another process has written since, the first save's
	// compare-and-set fails before any side effect, which is the answer
	// to a stale checkpointID anyway.
	r := g.fromCache(thread)
	if r == nil || checkpointID == "" || r.cp.ID != checkpointID {
		var err error
		if r, err = g.load(ctx, thread, checkpointID, false); err != nil {
			return nil, fmt.Errorf("resume %s: %w", thread, err)
		}
	}
	if r.cp.Status != Paused && r.cp.Status != Failed {
		return nil, fmt.Errorf("resume %s: %w (status %s)", thread, ErrNotPaused, r.cp.Status)
	}
	if err := g.checkCompatible(thread, r.cp); err != nil {
		return nil, fmt.Errorf("resume %s: %w", thread, err)
	}
	if err := r.answer(ctx, ids, mod, nil); err != nil {
		return nil, fmt.Errorf("resume %s: %w", thread, err)
	}
	// With merged saves, a resumed step of one node writes the answer
	// with the node's save before its first side effect.
	save := r.save
	if r.mergeable() {
		save = r.stage
	}
	if err := save(ctx, Running, nil); err != nil {
		g.cache.drop(thread)
		return nil, fmt.Errorf("resume %s: %w", thread, err)
	}
	return r.loop(ctx)
}

// Recover goes on with a run that was cut off: its latest checkpoint is
// Running but no process works on it (the caller makes sure of that, e.g.
// with a lease). A thread whose run is not Running gives ErrNotPaused.
func (g *Graph[S]) Recover(ctx context.Context, thread string) (*Result[S], error) {
	r, err := g.load(ctx, thread, "", false)
	if err != nil {
		return nil, fmt.Errorf("recover %s: %w", thread, err)
	}
	if r.cp.Status != Running {
		return nil, fmt.Errorf("recover %s: %w (status %s)", thread, ErrNotPaused, r.cp.Status)
	}
	if err := g.checkCompatible(thread, r.cp); err != nil {
		return nil, fmt.Errorf("recover %s: %w", thread, err)
	}
	return r.loop(ctx)
}

// Restart is the way out of an *IncompatibleError: it drops whatever the
// thread's unfinished step holds (pauses, writes, subgraph runs, barrier
// arrivals), lets mod adjust the state, and runs the graph as it is now
// from node. The thread must be paused, failed or cut off (Running).
func (g *Graph[S]) Restart(ctx context.Context, thread, node string, mod StateModifier[S]) (*Result[S], error) {
	if g.nodes[node] == nil {
		return nil, fmt.Errorf("restart %s at %q: unknown node", thread, node)
	}
	r, err := g.load(ctx, thread, "", false)
	if err != nil {
		return nil, fmt.Errorf("restart %s: %w", thread, err)
	}
	if r.cp.Status == Done {
		return nil, fmt.Errorf("restart %s: %w (status %s)", thread, ErrNotPaused, r.cp.Status)
	}
	if err := g.checkState(thread, r.cp.Fingerprint); err != nil {
		return nil, fmt.Errorf("restart %s: %w", thread, err)
	}
	if mod != nil {
		if err := mod(ctx, NodePath{node}, &r.state); err != nil {
			return nil, fmt.Errorf("restart %s: modify state: %w", thread, err)
		}
	}
	err = r.save(ctx, Running, func(cp *Checkpoint) {
		cp.Step++
		cp.Next, cp.Queued, cp.Writes, cp.Interrupts = []string{node}, nil, nil, nil
		cp.Arrivals, cp.Nested, cp.SkipBefore = nil, nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("restart %s: %w", thread, err)
	}
	return r.loop(ctx)
}

// Stop ends a paused, failed or cut-off run without running anything:
// mod adjusts the state (e.g. to tell the conversation why), and the
// thread is saved as done, so it can be continued later.
func (g *Graph[S]) Stop(ctx context.Context, thread string, mod StateModifier[S]) (*Result[S], error) {
	r, err := g.load(ctx, thread, "", false)
	if err != nil {
		return nil, fmt.Errorf("stop %s: %w", thread, err)
	}
	if r.cp.Status == Done {
		return nil, fmt.Errorf("stop %s: %w (status %s)", thread, ErrNotPaused, r.cp.Status)
	}
	if err := g.checkState(thread, r.cp.Fingerprint); err != nil {
		return nil, fmt.Errorf("stop %s: %w", thread, err)
	}
	if mod != nil {
		if err := mod(ctx, NodePath{End}, &r.state); err != nil {
			return nil, fmt.Errorf("stop %s: modify state: %w", thread, err)
		}
	}
	err = r.save(ctx, Done, func(cp *Checkpoint) {
		cp.Step++
		cp.Next, cp.Queued, cp.Writes, cp.Interrupts = nil, nil, nil, nil
		cp.Arrivals, cp.Nested, cp.SkipBefore = nil, nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("stop %s: %w", thread, err)
	}
	return r.result(), nil
}

// State returns the thread's latest checkpoint and its state.
func (g *Graph[S]) State(ctx context.Context, thread string) (*Result[S], error) {
	r, err := g.load(ctx, thread, "", true)
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", thread, err)
	}
	// The journal's room is the cache's (load): what the caller appends
	// to the state it is given goes to a copy.
	if j, ok := any(&r.state).(journalSharer[S]); ok {
		j.ShareJournal(&r.state)
	}
	return &Result[S]{Checkpoint: r.cp, State: r.state}, nil
}

// History returns the thread's checkpoints, newest first, without journals.
func (g *Graph[S]) History(ctx context.Context, thread string) ([]*Checkpoint, error) {
	h, err := g.store.History(ctx, thread)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", thread, err)
	}
	return h, nil
}

// Fork copies checkpoint checkpointID of thread, with its state, into the
// new thread newThread, where it becomes the first checkpoint. The fork is
// driven like any thread: Resume if it is paused or failed, Recover if it
// is running, Continue if it is done. A checkpoint taken inside a step of
// several nodes or inside a subgraph forks with that progress: the fork
// runs exactly what was left to run.
func (g *Graph[S]) Fork(ctx context.Context, thread, checkpointID, newThread string) (*Checkpoint, error) {
	hist, err := g.store.History(ctx, thread)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", thread, err)
	}
	i := slices.IndexFunc(hist, func(c *Checkpoint) bool { return c.ID == checkpointID })
	if i < 0 {
		return nil, fmt.Errorf("fork %s at %s: %w", thread, checkpointID, ErrNoCheckpoint)
	}
	src := hist[i]
	journal, err := g.store.Journal(ctx, thread, src.JournalLen)
	if err != nil {
		return nil, fmt.Errorf("fork %s at %s: %w", thread, checkpointID, err)
	}
	cp := *src
	cp.Thread, cp.ID, cp.Parent, cp.Seq = newThread, g.newID(), "", 1
	cp.JournalFrom, cp.Journal, cp.Created = 0, journal, g.now()
	if err := g.store.Save(ctx, &cp); err != nil {
		if errors.Is(err, ErrConflict) {
			err = ErrThreadExists
		}
		return nil, fmt.Errorf("fork %s into %s: %w", thread, newThread, err)
	}
	return cp.Meta(), nil
}

// load reads the thread's head and decodes its state. A non-empty wantID
// must match the head's ID. read says that the caller only reads the
// state: no run goes on from it.
func (g *Graph[S]) load(ctx context.Context, thread, wantID string, read bool) (*run[S], error) {
	r, ok, err := g.loadTail(ctx, thread)
	if !ok {
		var cp *Checkpoint
		if cp, err = g.store.Load(ctx, thread); err == nil {
			if err = upgrade(cp); err == nil {
				r = g.topRun(thread)
				err = r.decode(cp)
			}
		}
	}
	if err != nil {
		g.cache.drop(thread)
		return nil, err
	}
	// A run goes on from the state it loaded, appending to its journal
	// in place; a read (State) does not, and leaves the journal's room to
	// the cache, for the next run of the thread: that of a reply to an
	// approval card, say, which reads the thread, then continues it.
	g.cache.put(r.saved, &r.state, read)
	if wantID != "" && r.cp.ID != wantID {
		return nil, fmt.Errorf("%w: checkpoint %s is no longer the latest (%s is)", ErrConflict, wantID, r.cp.ID)
	}
	return r, nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	// Encoded on the stack: hex.EncodeToString would allocate twice.
	var digits [2 * len(b)]byte
	hex.Encode(digits[:], b[:])
	return string(digits[:])
}
