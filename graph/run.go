package graph

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
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

// Graph is a compiled graph. It is safe for concurrent use; runs of one
// thread must not overlap (the store's compare-and-set makes the loser of
// such a race fail with ErrConflict; callers keep a lease per thread).
type Graph[S any] struct {
	nodes  map[string]NodeFunc[S]
	edges  map[string][]string
	routes map[string]route[S]
	store  Store
	before []string
	after  []string
	now    func() time.Time
	newID  func() string
	merge  bool
	cache  *stateCache[S]
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

// Start begins a new thread with state init. It fails with ErrThreadExists
// if the thread has a checkpoint already.
func (g *Graph[S]) Start(ctx context.Context, thread string, init S, cfg RunConfig) (*Result[S], error) {
	// No load first: the first save is a compare-and-set on a thread
	// without checkpoints, which refuses an existing thread.
	r := &run[S]{g: g, thread: thread, state: init, cp: &Checkpoint{Thread: thread, Config: cfg}, saved: &Checkpoint{Thread: thread}}
	next, err := g.successors(Start, &r.state)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", thread, err)
	}
	if err := r.save(ctx, Running, func(cp *Checkpoint) { cp.Next = next }); err != nil {
		if errors.Is(err, ErrConflict) {
			err = ErrThreadExists
		}
		return nil, fmt.Errorf("start %s: %w", thread, err)
	}
	return r.loop(ctx)
}

// Continue starts a new pass through the graph on a thread whose run is
// done, after mod has changed its state (for a conversation: a new user
// turn). It fails with ErrNotDone if the run has not finished.
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
		if r, err = g.load(ctx, thread, ""); err != nil {
			return nil, err
		}
	}
	if r.cp.Status != Done {
		if fromCache {
			return nil, errStaleCache // a stale cache cannot say the run is not done
		}
		return nil, fmt.Errorf("%w (status %s)", ErrNotDone, r.cp.Status)
	}
	if err := mod(ctx, NodePath{Start}, &r.state); err != nil {
		return nil, fmt.Errorf("modify state: %w", err)
	}
	next, err := g.successors(Start, &r.state)
	if err != nil {
		return nil, err
	}
	err = r.save(ctx, Running, func(cp *Checkpoint) { cp.Step++; cp.Next = next })
	if fromCache && errors.Is(err, ErrConflict) {
		return nil, errStaleCache
	}
	if err != nil {
		return nil, err
	}
	return r.loop(ctx)
}

// Resume answers a paused (or failed) thread: mod changes the saved state,
// the change is saved, and the run goes on from the node that paused or
// failed. A thread that is not paused or failed gives ErrNotPaused; losing
// a race with another writer gives ErrConflict. Either way nothing changes.
func (g *Graph[S]) Resume(ctx context.Context, thread string, mod StateModifier[S]) (*Result[S], error) {
	return g.ResumeAt(ctx, thread, "", mod)
}

// ResumeAt is Resume that also requires the thread's latest checkpoint to
// be checkpointID, so an answer to an old pause cannot be applied to a
// newer one; a stale checkpointID gives ErrConflict.
func (g *Graph[S]) ResumeAt(ctx context.Context, thread, checkpointID string, mod StateModifier[S]) (*Result[S], error) {
	// Asked to resume the very checkpoint that is cached, start from the
	// cache: if another process has written since, the first save's
	// compare-and-set fails before any side effect, which is the answer
	// to a stale checkpointID anyway.
	r := g.fromCache(thread)
	if r == nil || checkpointID == "" || r.cp.ID != checkpointID {
		var err error
		if r, err = g.load(ctx, thread, checkpointID); err != nil {
			return nil, fmt.Errorf("resume %s: %w", thread, err)
		}
	}
	if r.cp.Status != Paused && r.cp.Status != Failed {
		return nil, fmt.Errorf("resume %s: %w (status %s)", thread, ErrNotPaused, r.cp.Status)
	}
	var path NodePath
	switch {
	case len(r.cp.Interrupts) > 0:
		path = r.cp.Interrupts[0].Path
	case len(r.cp.Next) > 0:
		path = NodePath{r.cp.Next[0]}
	}
	if mod != nil {
		if err := mod(ctx, path, &r.state); err != nil {
			return nil, fmt.Errorf("resume %s: modify state: %w", thread, err)
		}
	}
	skip := r.cp.SkipBefore
	for _, in := range r.cp.Interrupts {
		if node, ok := strings.CutPrefix(in.Reason, reasonBefore); ok {
			skip = append(skip, node)
		}
	}
	// With merged saves, the modified state is written by the resumed
	// node's save before its first side effect.
	err := r.stage(ctx, Running, func(cp *Checkpoint) { cp.SkipBefore = skip })
	if err != nil {
		g.cache.drop(thread)
		return nil, fmt.Errorf("resume %s: %w", thread, err)
	}
	return r.loop(ctx)
}

// Recover goes on with a run that was cut off: its latest checkpoint is
// Running but no process works on it (the caller makes sure of that, e.g.
// with a lease). A thread whose run is not Running gives ErrNotPaused.
func (g *Graph[S]) Recover(ctx context.Context, thread string) (*Result[S], error) {
	r, err := g.load(ctx, thread, "")
	if err != nil {
		return nil, fmt.Errorf("recover %s: %w", thread, err)
	}
	if r.cp.Status != Running {
		return nil, fmt.Errorf("recover %s: %w (status %s)", thread, ErrNotPaused, r.cp.Status)
	}
	return r.loop(ctx)
}

// State returns the thread's latest checkpoint and its state.
func (g *Graph[S]) State(ctx context.Context, thread string) (*Result[S], error) {
	r, err := g.load(ctx, thread, "")
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", thread, err)
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
// is running, Continue if it is done.
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
// must match the head's ID.
func (g *Graph[S]) load(ctx context.Context, thread, wantID string) (*run[S], error) {
	r, ok, err := g.loadTail(ctx, thread)
	if !ok {
		var cp *Checkpoint
		if cp, err = g.store.Load(ctx, thread); err == nil {
			if err = upgrade(cp); err == nil {
				r = &run[S]{g: g, thread: thread, cp: cp}
				err = r.decode(cp)
			}
		}
	}
	if err != nil {
		g.cache.drop(thread)
		return nil, err
	}
	g.cache.put(r.cp, &r.state)
	if wantID != "" && r.cp.ID != wantID {
		return nil, fmt.Errorf("%w: checkpoint %s is no longer the latest (%s is)", ErrConflict, wantID, r.cp.ID)
	}
	return r, nil
}

// successors returns the nodes that follow node, given the state.
func (g *Graph[S]) successors(node string, s *S) ([]string, error) {
	next := slices.Clone(g.edges[node])
	if r, ok := g.routes[node]; ok {
		picked := r.fn(s)
		for _, p := range picked {
			if p != End && g.nodes[p] == nil {
				return nil, fmt.Errorf("route from %q picked unknown node %q", node, p)
			}
		}
		next = append(next, picked...)
	}
	return addUnique(nil, next...), nil
}

const (
	reasonBefore = "before:"
	reasonAfter  = "after:"
)

// run is one stretch of execution of a thread, from a checkpoint to the
// next pause, failure or the end.
type run[S any] struct {
	g      *Graph[S]
	thread string
	state  S
	cp     *Checkpoint // the last checkpoint written or loaded, or staged
	// staged: cp is not written yet (see Options.MergeSaves); it will
	// be written with the next save, under cp's Seq.
	staged bool
	// saved is what the store holds: the last checkpoint written or
	// loaded, with its state's JSON.
	saved *Checkpoint
}

// loop runs steps until the run ends, pauses or fails.
func (r *run[S]) loop(ctx context.Context) (*Result[S], error) {
	for {
		if len(r.cp.Next) == 0 {
			next := addUnique(nil, r.cp.Queued...)
			status := Running
			if len(next) == 0 {
				status = Done
			}
			save := r.save
			if status == Running {
				save = r.stage // a step boundary: written with the next save
			}
			err := save(ctx, status, func(cp *Checkpoint) {
				cp.Step++
				cp.Next, cp.Queued, cp.SkipBefore = next, nil, nil
			})
			if err != nil {
				return nil, err
			}
			if status == Done {
				return r.result(), nil
			}
			continue
		}
		node := r.cp.Next[0]
		if r.pauses(node, reasonBefore) && !slices.Contains(r.cp.SkipBefore, node) {
			return r.pause(ctx, interrupt.Info{Reason: reasonBefore + node}, node)
		}
		err := r.runNode(ctx, node)
		if info, ok := interrupt.Extract(err); ok {
			return r.pause(ctx, *info, node)
		}
		if err != nil {
			return r.fail(ctx, node, err)
		}
		queued, err := r.g.successors(node, &r.state)
		if err != nil {
			return r.fail(ctx, node, err)
		}
		// The node is finished: drop it from Next and queue what follows,
		// in memory; the next save records both together.
		r.cp.Next = r.cp.Next[1:]
		r.cp.Queued = addUnique(r.cp.Queued, withoutEnd(queued)...)
		r.cp.SkipBefore = slices.DeleteFunc(slices.Clone(r.cp.SkipBefore), func(n string) bool { return n == node })
		if r.pauses(node, reasonAfter) {
			return r.pause(ctx, interrupt.Info{Reason: reasonAfter + node}, node)
		}
	}
}

// runNode runs one node, turning a panic into an error.
func (r *run[S]) runNode(ctx context.Context, node string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	save := func(ctx context.Context) error { return r.nodeSave(ctx) }
	return r.g.nodes[node](ctx, &r.state, save)
}

// pauses reports whether the graph or this run interrupts at node.
func (r *run[S]) pauses(node, when string) bool {
	if when == reasonBefore {
		return slices.Contains(r.g.before, node) || slices.Contains(r.cp.Config.InterruptBefore, node)
	}
	return slices.Contains(r.g.after, node) || slices.Contains(r.cp.Config.InterruptAfter, node)
}

// pause saves a paused checkpoint for an interrupt at node. The ID is
// made of the step and the node path, so reaching the same pause again —
// a node that re-runs and interrupts once more — gives the same ID.
func (r *run[S]) pause(ctx context.Context, info interrupt.Info, node string) (*Result[S], error) {
	info.Path = NodePath{node}
	info.ID = fmt.Sprintf("%d:%s", r.cp.Step, NodePath(info.Path))
	err := r.save(ctx, Paused, func(cp *Checkpoint) {
		cp.Interrupts = []interrupt.Info{info}
		cp.KeepUntil = info.Deadline
	})
	if err != nil {
		return nil, err
	}
	return r.result(), nil
}

// fail saves a failed checkpoint holding the failed node's input: the
// state as last saved, not what the node left of it.
func (r *run[S]) fail(ctx context.Context, node string, cause error) (*Result[S], error) {
	nodeErr := &NodeError{Node: node, Err: cause}
	head, err := r.g.store.Load(ctx, r.thread)
	if err != nil {
		return nil, errors.Join(nodeErr, err)
	}
	if head.Seq != r.saved.Seq {
		r.g.cache.drop(r.thread)
		return nil, errors.Join(nodeErr, fmt.Errorf("save failure: %w", ErrConflict))
	}
	if err := r.decode(head); err != nil {
		return nil, errors.Join(nodeErr, err)
	}
	// With merged saves the failed node's input may be a step later than
	// the head; the steps in between had no side effect, so resuming from
	// the head re-runs them to the same point.
	r.cp.Next, r.cp.Queued = head.Next, head.Queued
	if err := r.save(ctx, Failed, func(cp *Checkpoint) { cp.Error = nodeErr.Error() }); err != nil {
		return nil, errors.Join(nodeErr, err)
	}
	return r.result(), nodeErr
}

func (r *run[S]) result() *Result[S] {
	return &Result[S]{Checkpoint: r.cp.Meta(), State: r.state}
}

// save writes the current state as the thread's next checkpoint. edit, if
// not nil, adjusts the checkpoint before it is written. On success the
// checkpoint becomes the run's current one.
func (r *run[S]) save(ctx context.Context, status Status, edit func(*Checkpoint)) error {
	return r.write(ctx, r.next(status, edit), nil)
}

// write encodes and stores cp; state, if not nil, is the state's JSON
// already encoded.
func (r *run[S]) write(ctx context.Context, cp *Checkpoint, state []byte) error {
	if err := r.encode(cp, r.saved.JournalLen, state); err != nil {
		return err
	}
	if err := r.g.store.Save(ctx, cp); err != nil {
		if errors.Is(err, ErrConflict) {
			r.g.cache.drop(r.thread)
		}
		return fmt.Errorf("save checkpoint %d of %s: %w", cp.Seq, r.thread, err)
	}
	r.setSaved(cp)
	r.g.cache.put(r.saved, &r.state)
	return nil
}

// stage is save for a checkpoint that need not be written yet (see
// Options.MergeSaves): it becomes the run's current one in memory and is
// written with the next save. Without MergeSaves it saves.
func (r *run[S]) stage(ctx context.Context, status Status, edit func(*Checkpoint)) error {
	if !r.g.merge {
		return r.save(ctx, status, edit)
	}
	r.cp = r.next(status, edit).Meta()
	r.staged = true
	return nil
}

// nodeSave is a node's SaveFunc. With merged saves it writes nothing when
// the state is as last saved: what the run did since is routing, which a
// resume from the saved checkpoint does again.
func (r *run[S]) nodeSave(ctx context.Context) error {
	if !r.g.merge || r.saved.Seq == 0 {
		return r.save(ctx, Running, nil)
	}
	state, err := json.Marshal(&r.state)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	n := 0
	if j, ok := any(&r.state).(Journaled); ok {
		n = j.JournalLen()
	}
	if n == r.saved.JournalLen && bytes.Equal(state, r.saved.State) {
		return nil
	}
	return r.write(ctx, r.next(Running, nil), state)
}

// next returns the checkpoint that follows the run's current one.
func (r *run[S]) next(status Status, edit func(*Checkpoint)) *Checkpoint {
	prev := r.cp
	seq, parent := prev.Seq+1, prev.ID
	if r.staged {
		seq, parent = prev.Seq, prev.Parent
	}
	cp := &Checkpoint{
		Version:    SchemaVersion,
		Thread:     r.thread,
		ID:         r.g.newID(),
		Parent:     parent,
		Seq:        seq,
		Step:       prev.Step,
		Status:     status,
		Next:       slices.Clone(prev.Next),
		Queued:     slices.Clone(prev.Queued),
		Config:     prev.Config,
		SkipBefore: slices.Clone(prev.SkipBefore),
		Created:    r.g.now(),
		JournalLen: r.saved.JournalLen,
	}
	if edit != nil {
		edit(cp)
	}
	return cp
}

// setSaved records cp as what the store holds and the run's current
// checkpoint.
func (r *run[S]) setSaved(cp *Checkpoint) {
	r.saved = cp.Meta()
	r.cp = cp.Meta()
	r.cp.Next, r.cp.Queued, r.cp.SkipBefore = slices.Clone(cp.Next), slices.Clone(cp.Queued), slices.Clone(cp.SkipBefore)
	r.staged = false
}

// encode fills cp's State and the journal entries added since from.
func (r *run[S]) encode(cp *Checkpoint, from int, state []byte) error {
	if state == nil {
		var err error
		if state, err = json.Marshal(&r.state); err != nil {
			return fmt.Errorf("encode state: %w", err)
		}
	}
	cp.State = state
	cp.JournalFrom = from
	if j, ok := any(&r.state).(Journaled); ok {
		n := j.JournalLen()
		if n < from {
			return fmt.Errorf("encode state: journal shrank from %d to %d entries; it is append-only", from, n)
		}
		entries, err := j.MarshalJournal(from)
		if err != nil {
			return fmt.Errorf("encode journal: %w", err)
		}
		cp.JournalLen, cp.Journal = n, entries
	}
	return nil
}

// decode replaces the run's state with the one cp holds.
func (r *run[S]) decode(cp *Checkpoint) error {
	var s S
	if err := json.Unmarshal(cp.State, &s); err != nil {
		return fmt.Errorf("decode state of checkpoint %s: %w", cp.ID, err)
	}
	if j, ok := any(&s).(Journaled); ok {
		if len(cp.Journal) != cp.JournalLen {
			return fmt.Errorf("decode checkpoint %s: journal has %d of %d entries", cp.ID, len(cp.Journal), cp.JournalLen)
		}
		if err := j.UnmarshalJournal(cp.Journal); err != nil {
			return fmt.Errorf("decode journal of checkpoint %s: %w", cp.ID, err)
		}
	}
	r.state = s
	r.setSaved(cp)
	return nil
}

func addUnique(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

func withoutEnd(nodes []string) []string {
	return slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == End })
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
