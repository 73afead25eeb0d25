package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/countersign/countersign/interrupt"
)

const (
	reasonBefore = "before:"
	reasonAfter  = "after:"
)

// modifier is a StateModifier with its state type erased, so that one
// resume can reach the states of subgraphs.
type modifier struct {
	// deep: apply at the innermost graph that paused, not at the top.
	deep bool
	fn   func(ctx context.Context, path NodePath, s any) error
}

func topModifier[S any](mod StateModifier[S]) *modifier {
	if mod == nil {
		return nil
	}
	return &modifier{fn: func(ctx context.Context, path NodePath, s any) error { return mod(ctx, path, s.(*S)) }}
}

// run is one stretch of execution of a thread, from a checkpoint to the
// next pause, failure or the end.
type run[S any] struct {
	g      *Graph[S]
	thread string
	// state is the thread's state; in a step of several nodes, the state
	// the step began with (each node works on its own copy).
	state S
	// persist writes a checkpoint: for a subgraph's run, the parent's
	// save; nil for the store's Save (see write).
	persist func(context.Context, *Checkpoint) error

	// top: the run is of a thread of g itself, not of a subgraph node;
	// only such a run merges saves and uses the cache.
	top bool

	mu sync.Mutex // serialises saves by the nodes of one step
	// cp is the last checkpoint written or loaded, or staged. After a
	// save or a load it is saved itself, until the run changes a field
	// (own).
	cp *Checkpoint
	// staged: cp is not written yet (see Options.MergeSaves); it will be
	// written with the next save, under cp's Seq.
	staged bool
	// saved is what the store holds: the last checkpoint written or
	// loaded, with its state's JSON.
	saved *Checkpoint
	// begun is the staged checkpoint that began the pass (Start,
	// Continue) until the pass first writes: what a failure before then
	// goes back to.
	begun *begun
	// saveNode is nodeSave, as a SaveFunc.
	saveNode SaveFunc
}

// begun is a staged checkpoint that begins a pass, with its state.
type begun struct {
	cp         *Checkpoint
	state      []byte // the state's JSON, without its journal
	journalLen int    // the journal's length: its entries are append-only
}

// merges reports whether the run may merge the saves of node (see
// Options.MergeSaves): only in a step of that one node alone, run on
// the state itself, and not for a subgraph node, whose saves carry its
// own run's checkpoints.
func (r *run[S]) merges(node string) bool {
	return r.top && r.g.mergeSaves && r.g.subs[node] == nil
}

// mergeable reports whether the step the run is about to take is one
// whose saves may be merged.
func (r *run[S]) mergeable() bool {
	return len(r.cp.Next) == 1 && len(r.cp.Writes) == 0 && len(r.cp.Interrupts) == 0 && r.merges(r.cp.Next[0])
}

// loop runs steps until the run ends, pauses or fails.
func (r *run[S]) loop(ctx context.Context) (*Result[S], error) {
	for {
		var res *Result[S]
		var err error
		switch {
		case slices.ContainsFunc(r.cp.Interrupts, func(in interrupt.Info) bool { return strings.HasPrefix(in.Reason, reasonAfter) }):
			// A pause after a finished step is still open: nothing may run.
			res, err = r.pause(ctx, nil)
		case len(r.cp.Next) == 0:
			res, err = r.endStep(ctx, nil, nil)
		case len(r.cp.Next) == 1 && len(r.cp.Writes) == 0 && len(r.cp.Interrupts) == 0:
			res, err = r.stepInPlace(ctx, r.cp.Next[0])
		default:
			res, err = r.stepBranches(ctx)
		}
		if res != nil || err != nil {
			return res, err
		}
	}
}

// stepInPlace runs a step of one node on the state itself.
func (r *run[S]) stepInPlace(ctx context.Context, node string) (*Result[S], error) {
	if r.pauses(node, reasonBefore) && !slices.Contains(r.cp.SkipBefore, node) {
		return r.pause(ctx, []interrupt.Info{r.stamp(node, interrupt.Info{Reason: reasonBefore + node})})
	}
	var save SaveFunc
	if r.merges(node) {
		if r.saveNode == nil {
			r.saveNode = r.nodeSave // made once a run, not at each step
		}
		save = r.saveNode
	} else {
		save = func(ctx context.Context) error { return r.save(ctx, Running, nil) }
	}
	err := r.runNode(ctx, node, &r.state, save)
	if infos, ok := r.interrupts(node, err); ok {
		return r.pause(ctx, infos)
	}
	if err != nil {
		return r.failInPlace(ctx, node, err)
	}
	order := [1]string{node}
	return r.endStep(ctx, order[:], nil)
}

// stepBranches runs the nodes of a step of several nodes concurrently, each
// on its own copy of the state, and merges their changes when all are
// done. A node that pauses or fails leaves the others' work saved in the
// checkpoint's writes.
func (r *run[S]) stepBranches(ctx context.Context) (*Result[S], error) {
	base, err := r.clone(&r.state)
	if err != nil {
		return nil, err
	}
	r.state = base
	var runnable []string
	var before []interrupt.Info
	for _, n := range r.cp.Next {
		if r.doneWrite(n) || r.waiting(n) {
			continue
		}
		runnable = append(runnable, n)
		if r.pauses(n, reasonBefore) && !slices.Contains(r.cp.SkipBefore, n) {
			before = append(before, r.stamp(n, interrupt.Info{Reason: reasonBefore + n}))
		}
	}
	if len(before) > 0 || (len(runnable) == 0 && len(r.cp.Interrupts) > 0) {
		return r.pause(ctx, before)
	}
	states := make([]*S, len(runnable))
	errs := make([]error, len(runnable))
	for i, n := range runnable {
		if states[i], err = r.branchState(n); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	for i, n := range runnable {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := states[i]
			errs[i] = r.runNode(ctx, n, st, func(ctx context.Context) error {
				r.mu.Lock()
				defer r.mu.Unlock()
				if err := r.setWrite(n, st, false); err != nil {
					return err
				}
				return r.saveLocked(ctx, Running, nil)
			})
		}()
	}
	wg.Wait()

	var infos []interrupt.Info
	var failed *NodeError
	var failures []error
	finished := map[string]*S{}
	for i, n := range runnable {
		if ins, ok := r.interrupts(n, errs[i]); ok {
			if err := r.setWrite(n, states[i], false); err != nil {
				return nil, err
			}
			infos = append(infos, ins...)
			continue
		}
		if errs[i] != nil {
			// What the node did before it failed is discarded: its write
			// stays as it was last saved.
			if failed == nil {
				failed = &NodeError{Node: n, Err: errs[i]}
			}
			failures = append(failures, &NodeError{Node: n, Err: errs[i]})
			continue
		}
		if err := r.setWrite(n, states[i], true); err != nil {
			return nil, err
		}
		finished[n] = states[i]
	}
	if failed != nil {
		msg := errors.Join(failures...).Error()
		// A retry runs every failed node again: one that fails for good
		// makes the step fail for good.
		final := slices.ContainsFunc(failures, IsFinal)
		err := r.save(ctx, Failed, func(cp *Checkpoint) {
			cp.Interrupts = append(cp.Interrupts, infos...)
			cp.Error, cp.Final = msg, final
		})
		if err != nil {
			return nil, unsavedFailure(failed, err)
		}
		if len(failures) > 1 {
			failed.Err = errors.Join(failures...)
		}
		return r.result(), failed
	}
	if len(infos) > 0 || len(r.cp.Interrupts) > 0 {
		return r.pause(ctx, infos)
	}
	for _, n := range r.cp.Next {
		if finished[n] == nil {
			if finished[n], err = r.branchState(n); err != nil {
				return nil, err
			}
		}
	}
	merged, err := r.g.merge(&base, r.cp.Next, finished)
	if err != nil {
		nodeErr := &NodeError{Node: strings.Join(r.cp.Next, ","), Err: err}
		if err := r.save(ctx, Failed, func(cp *Checkpoint) { cp.Error = nodeErr.Error() }); err != nil {
			return nil, unsavedFailure(nodeErr, err)
		}
		return r.result(), nodeErr
	}
	r.state = merged
	return r.endStep(ctx, r.cp.Next, finished)
}

// endStep schedules the next step from the finished nodes of this one (in
// order, each routed on its own final state: states[node], or with
// states nil, the run's state, which a step of one node ran on), records
// barrier arrivals, and saves the step's checkpoint.
func (r *run[S]) endStep(ctx context.Context, order []string, states map[string]*S) (*Result[S], error) {
	stateOf := func(node string) *S {
		if states == nil {
			return &r.state
		}
		return states[node]
	}
	next := addUnique(nil, r.cp.Queued...)
	arrivals := maps.Clone(r.cp.Arrivals) // nil without barriers waiting: made when one is
	var after []interrupt.Info
	for _, node := range order {
		succ, err := r.g.successors(node, stateOf(node))
		if err != nil {
			return r.failInPlace(ctx, node, err)
		}
		succ = slices.DeleteFunc(succ, func(n string) bool { return n == End }) // succ is ours: see successors
		if next == nil {
			next = succ
		} else {
			next = addUnique(next, succ...)
		}
		for _, j := range r.g.joins {
			if !slices.Contains(j.sources, node) {
				continue
			}
			got := addUnique(slices.Clone(arrivals[j.key]), node)
			if len(got) == len(j.sources) {
				next = addUnique(next, j.target)
				delete(arrivals, j.key)
			} else {
				if arrivals == nil {
					arrivals = map[string][]string{}
				}
				arrivals[j.key] = got
			}
		}
		if r.pauses(node, reasonAfter) {
			after = append(after, r.stamp(node, interrupt.Info{Reason: reasonAfter + node}))
		}
	}
	if len(arrivals) == 0 {
		arrivals = nil
	}
	status := Running
	switch {
	case len(after) > 0:
		status = Paused
	case len(next) == 0:
		status = Done
	}
	save := r.save
	if status == Running && len(order) == 1 && stateOf(order[0]) == &r.state && r.merges(order[0]) {
		save = r.stage // a step boundary: written with the next save
	}
	err := save(ctx, status, func(cp *Checkpoint) {
		cp.Step++
		cp.Next, cp.Queued, cp.Writes, cp.SkipBefore = next, nil, nil, nil
		cp.Arrivals, cp.Interrupts = arrivals, after
	})
	if err != nil {
		return nil, err
	}
	if status != Running {
		return r.result(), nil
	}
	return nil, nil
}

// runNode runs one node on s, turning a panic into an error.
func (r *run[S]) runNode(ctx context.Context, node string, s *S, save SaveFunc) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	if sub := r.g.subs[node]; sub != nil {
		r.mu.Lock()
		nested := r.cp.Nested[node]
		r.mu.Unlock()
		return sub.runNested(ctx, s, nested, func(raw json.RawMessage) { r.setNested(node, raw) }, save)
	}
	return r.g.nodes[node](ctx, s, save)
}

// setNested records (raw != nil) or forgets a subgraph node's checkpoint,
// for the next save.
func (r *run[S]) setNested(node string, raw json.RawMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]json.RawMessage{}
	for k, v := range r.cp.Nested {
		m[k] = v
	}
	if raw == nil {
		delete(m, node)
	} else {
		m[node] = raw
	}
	if len(m) == 0 {
		m = nil
	}
	r.own().Nested = m
}

// interrupts turns a node's interrupt (its own, or a subgraph's pauses)
// into the interrupts this run pauses on.
func (r *run[S]) interrupts(node string, err error) ([]interrupt.Info, bool) {
	if err == nil {
		return nil, false // as most nodes end: nothing for errors.As to look at
	}
	var np *nestedPause
	if errors.As(err, &np) {
		out := make([]interrupt.Info, len(np.infos))
		for i, in := range np.infos {
			in.Path = append(NodePath{node}, in.Path...)
			in.ID = fmt.Sprintf("%d:%s/%s", r.cp.Step, node, in.ID)
			out[i] = in
		}
		return out, true
	}
	if info, ok := interrupt.Extract(err); ok {
		return []interrupt.Info{r.stamp(node, *info)}, true
	}
	return nil, false
}

// stamp gives an interrupt at node its path and ID. The ID is made of the
// step and the node path, so reaching the same pause again — a node that
// re-runs and interrupts once more — gives the same ID, and the nodes of
// one step get distinct ones.
func (r *run[S]) stamp(node string, info interrupt.Info) interrupt.Info {
	info.Path = NodePath{node}
	info.ID = strconv.Itoa(r.cp.Step) + ":" + node // "%d:%s" of the step and the path
	return info
}

// pauses reports whether the graph or this run interrupts at node.
func (r *run[S]) pauses(node, when string) bool {
	if when == reasonBefore {
		return slices.Contains(r.g.before, node) || slices.Contains(r.cp.Config.InterruptBefore, node)
	}
	return slices.Contains(r.g.after, node) || slices.Contains(r.cp.Config.InterruptAfter, node)
}

// pause saves a paused checkpoint waiting on the run's open interrupts and
// infos.
func (r *run[S]) pause(ctx context.Context, infos []interrupt.Info) (*Result[S], error) {
	err := r.save(ctx, Paused, func(cp *Checkpoint) { cp.Interrupts = append(cp.Interrupts, infos...) })
	if err != nil {
		return nil, err
	}
	return r.result(), nil
}

// unsavedFailure is the error of a run whose node failed and whose save
// of that failure failed too: both, in errors.Is's reach. When the node
// failed on a save of the same checkpoint (the store is down), the node's
// error says the save's already, and the text says it once.
func unsavedFailure(nodeErr, saveErr error) error {
	if text := nodeErr.Error(); strings.Contains(text, saveErr.Error()) {
		return &textOnce{errs: []error{nodeErr, saveErr}, text: text}
	}
	return errors.Join(nodeErr, saveErr)
}

// textOnce joins errors whose text is the first one's.
type textOnce struct {
	errs []error
	text string
}

func (e *textOnce) Error() string   { return e.text }
func (e *textOnce) Unwrap() []error { return e.errs }

// failInPlace saves a failed checkpoint holding the failed node's input:
// the state as last saved, not what the node left of it.
func (r *run[S]) failInPlace(ctx context.Context, node string, cause error) (*Result[S], error) {
	nodeErr := &NodeError{Node: node, Err: cause}
	if err := r.restore(); err != nil {
		return nil, errors.Join(nodeErr, err)
	}
	if err := r.save(ctx, Failed, func(cp *Checkpoint) { cp.Error, cp.Final = nodeErr.Error(), IsFinal(cause) }); err != nil {
		return nil, unsavedFailure(nodeErr, err)
	}
	return r.result(), nodeErr
}

// restore puts the state back to what the last checkpoint written holds.
// With merged saves that may be a step earlier than the run's current
// checkpoint: the run goes back to it, as the steps in between had no
// side effect, so a resume from it runs them again to the same point.
func (r *run[S]) restore() error {
	state, journalLen := r.saved.State, r.saved.JournalLen
	switch {
	case r.begun != nil:
		// Nothing of this pass was written: go back to its start,
		// still staged, so that the failure is written in its place.
		r.cp, r.staged = r.begun.cp.Meta(), true
		r.cp.Next = slices.Clone(r.begun.cp.Next)
		state, journalLen = r.begun.state, r.begun.journalLen
	case r.staged:
		r.keepSaved(r.saved)
	}
	var entries []json.RawMessage
	if j, ok := any(&r.state).(Journaled); ok {
		all, err := j.MarshalJournal(0)
		if err != nil {
			return fmt.Errorf("encode journal: %w", err)
		}
		if len(all) < journalLen {
			return fmt.Errorf("journal shrank from %d to %d entries; it is append-only", journalLen, len(all))
		}
		entries = all[:journalLen]
	}
	s, err := decodeState[S](state, entries)
	if err != nil {
		return err
	}
	r.state = s
	return nil
}

// answer applies mod to the pauses named by ids (all if none) or, for a
// failed run, to the nodes that failed, and readies the run to go on; the
// caller saves. prefix is the path of the subgraph node this run is in.
func (r *run[S]) answer(ctx context.Context, ids []string, mod *modifier, prefix NodePath) error {
	if r.cp.Status == Failed {
		for _, n := range r.cp.Next {
			if r.doneWrite(n) || r.waiting(n) {
				continue
			}
			if err := r.reopen(ctx, n, NodePath{n}, nil, mod, prefix); err != nil {
				return err
			}
		}
		return nil
	}
	chosen := r.cp.Interrupts
	if len(ids) > 0 {
		chosen = nil
		for _, id := range ids {
			i := slices.IndexFunc(r.cp.Interrupts, func(in interrupt.Info) bool { return in.ID == id })
			if i < 0 {
				return fmt.Errorf("%w: %s", ErrNoInterrupt, id)
			}
			chosen = append(chosen, r.cp.Interrupts[i])
		}
	}
	var nodes []string
	inner := map[string][]string{}
	for _, in := range chosen {
		node := pathHead(in)
		nodes = addUnique(nodes, node)
		if len(in.Path) > 1 {
			if _, id, ok := strings.Cut(in.ID, "/"); ok {
				inner[node] = append(inner[node], id)
			}
		}
	}
	for _, node := range nodes {
		// Every interrupt of an answered node closes: the node runs again,
		// and a subgraph's unanswered pauses reopen from its own
		// checkpoint under the same IDs.
		var reasons []string
		var path NodePath
		for _, in := range r.cp.Interrupts {
			if pathHead(in) == node {
				reasons = append(reasons, in.Reason)
				if path == nil {
					path = in.Path
				}
			}
		}
		r.own().Interrupts = slices.DeleteFunc(slices.Clone(r.cp.Interrupts), func(in interrupt.Info) bool { return pathHead(in) == node })
		switch {
		case slices.Contains(reasons, reasonAfter+node):
			if mod != nil {
				if err := mod.fn(ctx, append(slices.Clone(prefix), node), &r.state); err != nil {
					return err
				}
			}
		default:
			if slices.Contains(reasons, reasonBefore+node) {
				r.own().SkipBefore = addUnique(slices.Clone(r.cp.SkipBefore), node)
			}
			if err := r.reopen(ctx, node, path, inner[node], mod, prefix); err != nil {
				return err
			}
		}
	}
	return nil
}

// reopen applies mod to the state node runs from, and reopens the node's
// subgraph run, if it has one, with its own interrupts innerIDs answered.
func (r *run[S]) reopen(ctx context.Context, node string, path NodePath, innerIDs []string, mod *modifier, prefix NodePath) error {
	full := append(slices.Clone(prefix), path...)
	if sub := r.g.subs[node]; sub != nil && r.cp.Nested[node] != nil {
		var inner *modifier
		if mod != nil && mod.deep {
			inner = mod
		}
		raw, err := sub.answerNested(ctx, r.cp.Nested[node], innerIDs, inner, append(slices.Clone(prefix), node))
		if err != nil {
			return err
		}
		r.setNested(node, raw)
		if inner != nil {
			return nil
		}
	}
	if mod == nil {
		return nil
	}
	if len(r.cp.Next) == 1 && len(r.cp.Writes) == 0 {
		return mod.fn(ctx, full, &r.state)
	}
	st, err := r.branchState(node)
	if err != nil {
		return err
	}
	if err := mod.fn(ctx, full, st); err != nil {
		return err
	}
	return r.setWrite(node, st, false)
}

// doneWrite reports whether node has finished in this step.
func (r *run[S]) doneWrite(node string) bool {
	return slices.ContainsFunc(r.cp.Writes, func(w Write) bool { return w.Node == node && w.Done })
}

// waiting reports whether node waits on an interrupt.
func (r *run[S]) waiting(node string) bool {
	return slices.ContainsFunc(r.cp.Interrupts, func(in interrupt.Info) bool { return pathHead(in) == node })
}

// branchState returns the state node works on in a step of several nodes:
// the one its write holds, or a copy of the step's state.
func (r *run[S]) branchState(node string) (*S, error) {
	i := slices.IndexFunc(r.cp.Writes, func(w Write) bool { return w.Node == node })
	if i < 0 {
		s, err := r.clone(&r.state)
		return &s, err
	}
	w := r.cp.Writes[i]
	var entries []json.RawMessage
	if j, ok := any(&r.state).(Journaled); ok {
		base, err := j.MarshalJournal(0)
		if err != nil {
			return nil, fmt.Errorf("encode journal: %w", err)
		}
		entries = append(base[:r.cp.JournalLen:r.cp.JournalLen], w.Journal...)
	}
	s, err := decodeState[S](w.State, entries)
	if err != nil {
		return nil, fmt.Errorf("write of node %s: %w", node, err)
	}
	return &s, nil
}

// setWrite records node's copy of the state in the run's checkpoint, for
// the next save. The caller holds r.mu or runs alone.
func (r *run[S]) setWrite(node string, s *S, done bool) error {
	state, err := encodeState(s)
	if err != nil {
		return fmt.Errorf("encode state of node %s: %w", node, err)
	}
	w := Write{Node: node, Done: done, State: state}
	if j, ok := any(s).(Journaled); ok {
		if j.JournalLen() < r.cp.JournalLen {
			return fmt.Errorf("encode state of node %s: journal shrank; it is append-only", node)
		}
		if w.Journal, err = j.MarshalJournal(r.cp.JournalLen); err != nil {
			return fmt.Errorf("encode journal of node %s: %w", node, err)
		}
	}
	writes := slices.DeleteFunc(slices.Clone(r.cp.Writes), func(w Write) bool { return w.Node == node })
	writes = append(writes, w)
	// Keep the writes in the step's order.
	slices.SortStableFunc(writes, func(a, b Write) int {
		return slices.Index(r.cp.Next, a.Node) - slices.Index(r.cp.Next, b.Node)
	})
	r.own().Writes = writes
	return nil
}

// clone returns a deep copy of s, made through its checkpoint encoding.
func (r *run[S]) clone(s *S) (S, error) {
	state, err := encodeState(s)
	if err != nil {
		var zero S
		return zero, fmt.Errorf("encode state: %w", err)
	}
	var entries []json.RawMessage
	if j, ok := any(s).(Journaled); ok {
		if entries, err = j.MarshalJournal(0); err != nil {
			var zero S
			return zero, fmt.Errorf("encode journal: %w", err)
		}
	}
	return decodeState[S](state, entries)
}

// result returns where the run stands. Its state's journal has no room
// (see journalTaker): the caller's appends copy it.
func (r *run[S]) result() *Result[S] {
	res := &Result[S]{Checkpoint: r.cp.Meta(), State: r.state}
	if j, ok := any(&res.State).(journalSharer[S]); ok {
		j.ShareJournal(&r.state)
	}
	return res
}

// save writes the current state as the thread's next checkpoint. edit, if
// not nil, adjusts the checkpoint before it is written. On success the
// checkpoint becomes the run's current one.
func (r *run[S]) save(ctx context.Context, status Status, edit func(*Checkpoint)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.saveLocked(ctx, status, edit)
}

func (r *run[S]) saveLocked(ctx context.Context, status Status, edit func(*Checkpoint)) error {
	return r.writeLocked(ctx, r.next(status, edit), nil)
}

// next returns the checkpoint that follows the run's current one. It
// shares the current one's slices, as own's copies do (the run replaces
// them and never writes into one); they are clipped, so that an edit's
// append makes a slice of its own.
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
		Next:       slices.Clip(prev.Next),
		Queued:     slices.Clip(prev.Queued),
		Writes:     slices.Clip(prev.Writes),
		Arrivals:   prev.Arrivals,
		Nested:     prev.Nested,
		Interrupts: slices.Clip(prev.Interrupts),
		Config:     prev.Config,
		SkipBefore: slices.Clip(prev.SkipBefore),
		Created:    r.g.now(),
		JournalLen: r.saved.JournalLen,
	}
	if edit != nil {
		edit(cp)
	}
	if status == Done {
		cp.Interrupts = nil
	}
	for _, in := range cp.Interrupts {
		if in.Deadline.After(cp.KeepUntil) {
			cp.KeepUntil = in.Deadline
		}
	}
	return cp
}

// writeLocked encodes and persists cp; state, if not nil, is the state's
// JSON already encoded. On success cp becomes what the store holds and
// the run's current checkpoint. The caller holds r.mu or runs alone.
func (r *run[S]) writeLocked(ctx context.Context, cp *Checkpoint, state []byte) error {
	if err := r.encode(cp, r.saved.JournalLen, state); err != nil {
		return err
	}
	cp.Fingerprint = r.g.stamp(cp, &r.state, r.cp.Fingerprint)
	if err := r.write(r.lastSave(ctx, cp), cp); err != nil {
		if r.top && (errors.Is(err, ErrConflict) || errors.Is(err, ErrUnconfirmed)) {
			r.g.cache.drop(r.thread)
		}
		if errors.Is(err, ErrUnconfirmed) {
			// The store holds cp where it wrote it: the run's next
			// save (its failure, or what the node writes instead)
			// follows it, rather than conflict with it.
			cp.JournalFrom, cp.Journal = 0, nil
			r.keepSaved(cp)
		}
		// The store's error names the checkpoint already (see
		// MemoryStore and redisstore): a wrap would say it twice.
		return err
	}
	// cp is the run's own (next made it) and the store keeps no hold of
	// it: without its journal, it is the saved checkpoint itself.
	cp.JournalFrom, cp.Journal = 0, nil
	r.keepSaved(cp)
	if r.top {
		// A save that pauses, ends or fails the run is its last: the
		// run returns, and appends nothing more.
		r.g.cache.put(r.saved, &r.state, cp.Status != Running)
	}
	return nil
}

// write persists cp: with persist, or the store's Save (a method value
// of its own would be made for every run).
func (r *run[S]) write(ctx context.Context, cp *Checkpoint) error {
	if r.persist == nil {
		return r.g.store.Save(ctx, cp)
	}
	return r.persist(ctx, cp)
}

// stage is save for a checkpoint that need not be written yet (see
// Options.MergeSaves): it becomes the run's current one in memory and is
// written with the next save. Without MergeSaves it saves.
func (r *run[S]) stage(ctx context.Context, status Status, edit func(*Checkpoint)) error {
	if !r.top || !r.g.mergeSaves {
		return r.save(ctx, status, edit)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.cp.Fingerprint
	r.cp = r.next(status, edit) // a checkpoint of its own, without a journal
	r.cp.Fingerprint = r.g.stamp(r.cp, &r.state, prev)
	r.staged = true
	return nil
}

// nodeSave is the SaveFunc of a node whose saves merge. It writes nothing
// when the state is as last saved: what the run did since is routing,
// which a resume from the saved checkpoint does again.
func (r *run[S]) nodeSave(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.saved.Seq == 0 {
		return r.saveLocked(ctx, Running, nil)
	}
	state, err := encodeState(&r.state)
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
	return r.writeLocked(ctx, r.next(Running, nil), state)
}

// setSaved records cp as what the store holds and the run's current
// checkpoint. r.saved is a copy of its own, which nothing changes: the
// cache keeps it as it is.
func (r *run[S]) setSaved(cp *Checkpoint) {
	r.keepSaved(cp.Meta())
}

// keepSaved is setSaved of a checkpoint without a journal that nothing
// changes (one the run made, or the cache's): it becomes r.saved as it
// is, shared.
func (r *run[S]) keepSaved(cp *Checkpoint) {
	r.saved = cp
	r.cp = cp // until the run changes it: see own
	r.staged, r.begun = false, nil
}

// own returns the run's current checkpoint for the caller to set a field
// of, first making it a copy of its own if it is still r.saved, which
// nothing changes. The copy shares r.saved's slices and maps: the run
// replaces them, and never writes into one.
func (r *run[S]) own() *Checkpoint {
	if r.cp == r.saved {
		r.cp = r.saved.Meta()
	}
	return r.cp
}

// encode fills cp's State and the journal entries added since from.
func (r *run[S]) encode(cp *Checkpoint, from int, state []byte) error {
	if state == nil {
		var err error
		if state, err = encodeState(&r.state); err != nil {
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
	if _, ok := any(&r.state).(Journaled); ok && len(cp.Journal) != cp.JournalLen {
		return fmt.Errorf("decode checkpoint %s: journal has %d of %d entries", cp.ID, len(cp.Journal), cp.JournalLen)
	}
	s, err := decodeState[S](cp.State, cp.Journal)
	if err != nil {
		return fmt.Errorf("decode checkpoint %s: %w", cp.ID, err)
	}
	r.state = s
	r.setSaved(cp)
	return nil
}

// decodeState decodes a state from its JSON and its whole journal.
func decodeState[S any](state json.RawMessage, journal []json.RawMessage) (S, error) {
	var s S
	if err := decodeStateJSON(state, &s); err != nil {
		return s, fmt.Errorf("decode state: %w", err)
	}
	if j, ok := any(&s).(Journaled); ok {
		if err := j.UnmarshalJournal(journal); err != nil {
			return s, fmt.Errorf("decode journal: %w", err)
		}
	}
	return s, nil
}

// successors returns the nodes that follow node, given the state, in a
// slice of the caller's own.
func (g *Graph[S]) successors(node string, s *S) ([]string, error) {
	next := addUnique(nil, g.edges[node]...)
	if r, ok := g.routes[node]; ok {
		picked := r.fn(s)
		for _, p := range picked {
			if p != End && g.nodes[p] == nil {
				return nil, fmt.Errorf("route from %q picked unknown node %q", node, p)
			}
		}
		next = addUnique(next, picked...)
	}
	return next, nil
}

func addUnique(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

// pathHead is the node of this graph an interrupt belongs to ("" for a
// malformed one without a path).
func pathHead(in interrupt.Info) string {
	if len(in.Path) == 0 {
		return ""
	}
	return in.Path[0]
}
