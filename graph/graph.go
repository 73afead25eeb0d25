// Package graph is a small generic state-graph engine with durable pauses.
//
// A graph is a set of named nodes joined by static, conditional and
// barrier edges. A run executes in supersteps; the engine writes a
// checkpoint after every step, at every pause and on every failure, so a
// run is never lost and can be resumed by any process that can reach the
// store.
//
// # Steps, concurrency and merging
//
// The nodes scheduled for a step run concurrently. A step of one node
// works on the state itself. In a step of several nodes each node works on
// its own copy of the state (a deep copy made through the state's JSON and
// journal), and when all are done their changes are merged, field by
// field of the state struct, in the order the step scheduled the nodes
// (the order of Checkpoint.Next: the order in which finished nodes' edges
// named them; it does not depend on which node finished first):
//
//   - a field no node changed keeps its value;
//   - a field one node changed, or several changed to the same value,
//     takes that value;
//   - a field several nodes changed differently goes through its reducer
//     (Builder.AddReducer; Append for a slice nodes append to, such as a
//     conversation's messages);
//   - without a reducer the step fails with a *MergeError naming the
//     fields and the nodes.
//
// Each node's successors are routed on its own final state. A node
// scheduled by several nodes of one step runs once in the next step.
//
// A node that finishes, pauses or saves mid-way in a step of several
// nodes has its copy recorded in the checkpoint (Checkpoint.Writes): a
// node that fails fails the step without losing the others' work, and
// resuming re-runs only the nodes that have not finished.
//
// # Barriers
//
// Builder.AddJoin(sources, target) runs target once every source has
// finished since target last ran, in the step after the last arrival.
// Arrivals are saved in every checkpoint (Checkpoint.Arrivals), so a
// pause, a crash or a fork between two arrivals still runs target exactly
// once.
//
// # Pauses
//
// Pauses come in two kinds. Static interrupts pause before or after named
// nodes; they are set when the graph is compiled or for a single run.
// Dynamic interrupts come from inside a node, which returns an
// interrupt.Error (or interrupt.ErrInterruptAndRerun). Several nodes of one
// step may pause together; each interrupt has a stable ID made of the step
// and the node path. Resume answers them all; Answer answers one, and the
// run pauses again on the others, under the same IDs, without re-running
// their nodes. A resume's StateModifier gets the path of the node that
// paused and the state that node paused with; the modified state is saved
// before any node runs, and the paused node is re-run with the state it
// had.
//
// What a node does to the state before it returns an interrupt is kept and
// saved with the pause. What a node does before it fails (an error or a
// panic) is discarded: the failed checkpoint holds the node's input, and
// resuming it re-runs that node only. A node that is about to cause a side
// effect calls its SaveFunc first, so that a crash during the side effect
// leaves a checkpoint that says so.
//
// # Subgraphs
//
// Nest makes a compiled graph (with its own state type and functions that
// map the parent's state in and out) a node of another, added with
// Builder.AddSubgraph. The subgraph's checkpoint is kept inside the
// parent's (Checkpoint.Nested), one parent checkpoint per subgraph step, so
// history, Fork and Recover cover both levels. A pause inside the subgraph
// pauses the parent with the full NodePath ("doc/review");
// ResumeNested hands the StateModifier that path and the subgraph's state.
//
// # Fingerprints and deploys
//
// Every checkpoint records a Fingerprint of what its resume depends on:
// the graph's hash; the hashes of the nodes it would run first (the
// step's nodes and the nodes that paused — a node's hash covers its name,
// edges, barriers, static interrupts and, for a subgraph, the subgraph's
// hash); the parts its state depends on (Options.Parts, named by
// Builder.ResumeDependsOn, e.g. the schema of a pending tool call); and
// Options.StateVersion. Resume and Recover under another graph follow
// these rules:
//
//   - no fingerprint (a checkpoint older than fingerprints) or the same
//     graph hash: resume;
//   - otherwise resume if every recorded node and part is unchanged: new
//     nodes, new parts (a new tool), and changes elsewhere in the graph
//     do not matter;
//   - a recorded node or part that changed or is gone, or another state
//     version: nothing runs and nothing is saved; the call returns an
//     *IncompatibleError listing the Changes. Restart then runs the
//     thread from a node of the new graph, Stop ends it.
//
// Continue (a new pass on a finished run) only requires the same state
// version.
//
// # Merged saves
//
// With Options.MergeSaves (a promise that every node saves before each of
// its side effects) the engine writes fewer checkpoints, but only where
// that is clearly safe: in a step of one plain node, run on the state
// itself. There a node's save writes nothing if the state is as last
// written, and the checkpoint that ends the step is kept in memory and
// written with the next save; a resume that re-runs such a step writes
// the answer with the node's first save. Steps of several nodes and
// subgraph nodes (whose saves carry their own runs' checkpoints) are
// saved as without MergeSaves, and a subgraph's own run never merges. A
// failure in a step whose start was not written yet goes back to the
// last checkpoint written: the steps in between had no side effect, so a
// resume runs them again to the same point.
//
// # Checkpoint schema
//
// Checkpoint JSON field names never change. SchemaVersion is raised when
// the format changes; new fields are omitted when empty, and upgrade
// turns every older version this code can read into the current one (a
// version 1 checkpoint is a version 2 checkpoint without writes, arrivals,
// nested runs or fingerprint).
//
// Routing is pure: edges look at the state and nothing else.
//
// The package does not know about models, tools or Slack; the agent
// package builds the ReAct graph on it, and redisstore keeps its
// checkpoints in Redis. It ships an in-memory store for tests.
package graph

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Start and End are the pseudo-nodes where a run begins and ends.
const (
	Start = "__start__"
	End   = "__end__"
)

// NodePath names a node, outermost first: a node of a subgraph has the
// subgraph node's name, then its own path within the subgraph.
type NodePath []string

func (p NodePath) String() string {
	s := ""
	for i, n := range p {
		if i > 0 {
			s += "/"
		}
		s += n
	}
	return s
}

// SaveFunc writes the state as it is now to a checkpoint, before a side
// effect. If the process dies after it, the run resumes by re-running the
// node from that saved state.
type SaveFunc func(ctx context.Context) error

// NodeFunc does one node's work by changing the state in place.
type NodeFunc[S any] func(ctx context.Context, s *S, save SaveFunc) error

// RouteFunc picks the nodes that follow a node, from the state alone.
// Returning End (or nothing) ends that branch.
type RouteFunc[S any] func(s *S) []string

// StateModifier changes a thread's saved state when it is resumed or
// continued. path is the node that paused or failed (Start for Continue).
type StateModifier[S any] func(ctx context.Context, path NodePath, s *S) error

// Builder collects nodes and edges; Compile checks and freezes them.
type Builder[S any] struct {
	nodes     map[string]NodeFunc[S]
	edges     map[string][]string
	routes    map[string]route[S]
	joins     []join
	reducers  map[string]Reducer
	subs      map[string]subgraph[S]
	dependsOn func(*S) []string
	order     []string
	errs      []error
}

// join is a barrier edge: target runs once every source has finished
// since target last ran.
type join struct {
	sources []string
	target  string
	key     string // how Checkpoint.Arrivals names it
}

type route[S any] struct {
	fn      RouteFunc[S]
	targets []string
}

// New returns an empty builder for a graph over state S.
func New[S any]() *Builder[S] {
	return &Builder[S]{
		nodes:    map[string]NodeFunc[S]{},
		edges:    map[string][]string{},
		routes:   map[string]route[S]{},
		reducers: map[string]Reducer{},
		subs:     map[string]subgraph[S]{},
	}
}

// AddNode adds a node.
func (b *Builder[S]) AddNode(name string, fn NodeFunc[S]) *Builder[S] {
	switch {
	case name == "" || name == Start || name == End:
		b.errs = append(b.errs, fmt.Errorf("node name %q is reserved", name))
	case strings.ContainsAny(name, "/:"):
		b.errs = append(b.errs, fmt.Errorf("node name %q has a / or a :, which paths and interrupt IDs use", name))
	case b.nodes[name] != nil:
		b.errs = append(b.errs, fmt.Errorf("node %q added twice", name))
	case fn == nil:
		b.errs = append(b.errs, fmt.Errorf("node %q has no function", name))
	default:
		b.nodes[name] = fn
		b.order = append(b.order, name)
	}
	return b
}

// AddEdge makes to follow from every time from finishes.
func (b *Builder[S]) AddEdge(from, to string) *Builder[S] {
	b.edges[from] = append(b.edges[from], to)
	return b
}

// AddJoin adds a barrier edge: target runs once, in the step after the
// last of sources finishes, when every source has finished since target
// last ran. Which sources have arrived is saved in every checkpoint, so a
// resume, a recovery or a fork between two arrivals still runs target
// exactly once.
func (b *Builder[S]) AddJoin(sources []string, target string) *Builder[S] {
	srcs := addUnique(nil, sources...)
	if len(srcs) < 2 {
		b.errs = append(b.errs, fmt.Errorf("join into %q needs two sources or more", target))
	}
	key := strings.Join(srcs, "+") + ">" + target
	b.joins = append(b.joins, join{sources: srcs, target: target, key: key})
	return b
}

// AddReducer declares how to merge field (the Go name of a field of the
// state struct) when several nodes of one step change it, e.g.
// AddReducer("Messages", Append[llm.Message]()).
func (b *Builder[S]) AddReducer(field string, r Reducer) *Builder[S] {
	if _, dup := b.reducers[field]; dup {
		b.errs = append(b.errs, fmt.Errorf("field %q has two reducers", field))
	}
	b.reducers[field] = r
	return b
}

// AddSubgraph adds a node that runs a whole graph; see Nest.
func (b *Builder[S]) AddSubgraph(name string, sub Subgraph[S]) *Builder[S] {
	b.AddNode(name, func(context.Context, *S, SaveFunc) error {
		return fmt.Errorf("subgraph node %s run as a plain node", name)
	})
	if sub != nil {
		b.subs[name] = sub.subgraph()
	} else {
		b.errs = append(b.errs, fmt.Errorf("subgraph node %q has no graph", name))
	}
	return b
}

// ResumeDependsOn names, for a saved state, the parts (Options.Parts) its
// resume depends on — for the agent, the tools of the calls still to run.
// They are recorded in every checkpoint's fingerprint; a resume under a
// graph where one of them changed is refused. fn runs at every save; the
// engine only reads what it returns, which fn may share between calls.
func (b *Builder[S]) ResumeDependsOn(fn func(s *S) []string) *Builder[S] {
	b.dependsOn = fn
	return b
}

// AddConditionalEdge lets fn choose what follows from, among targets.
func (b *Builder[S]) AddConditionalEdge(from string, fn RouteFunc[S], targets ...string) *Builder[S] {
	if _, dup := b.routes[from]; dup {
		b.errs = append(b.errs, fmt.Errorf("node %q has two conditional edges", from))
	}
	b.routes[from] = route[S]{fn: fn, targets: targets}
	return b
}

// Options are a graph's optional settings.
type Options struct {
	// InterruptBefore and InterruptAfter name nodes that every run pauses
	// before or after. Runs can add more with RunConfig.
	InterruptBefore []string
	InterruptAfter  []string
	// Parts are named hashes of what the nodes depend on beyond the graph's
	// shape, e.g. "tool:http_request" → a hash of the tool's schema. They
	// go into the graph's fingerprint.
	Parts map[string]string
	// StateVersion is the version of the state's format; a checkpoint
	// written under another version is not resumed or continued.
	StateVersion int
	// Now and NewID are the clock and the checkpoint ID source.
	// Defaults: time.Now and random hex.
	Now   func() time.Time
	NewID func() string
	// MergeSaves promises that every node calls its SaveFunc before each
	// of its side effects and after each one whose outcome must not be
	// lost. The engine then saves only where durability needs it: when a
	// run pauses, fails or ends, and when a node asks — and a node's
	// request writes nothing if the state is as last saved. The
	// checkpoint that begins a pass (Start, Continue) or follows a step
	// is kept in memory and written with the next save, so consecutive
	// saves with no side effect between them become one, and a pass
	// whose first node has no side effect writes nothing before it. A
	// crash re-runs, from the last save, only steps that had no side
	// effect; a crash before a new pass's first write loses the pass
	// (Start and Continue may be called again). Off by default: then
	// every step is saved.
	MergeSaves bool
	// CacheThreads is how many threads' decoded states the graph keeps in
	// memory after it saved or loaded them (default 256; below 0: none):
	// enough for the threads a process is busy with, small enough that
	// the garbage collector does not pay for a large idle heap.
	// A cached thread is loaded with only what this process has not
	// seen — from a store that implements TailLoader — and Continue and
	// ResumeAt start from the cache without loading at all: their first
	// save is a compare-and-set on the cached checkpoint, so another
	// process's write is never missed (the run then fails with
	// ErrConflict, nothing written, and the cache entry is dropped).
	CacheThreads int
}

// Compile checks the graph and returns it ready to run with store.
func (b *Builder[S]) Compile(store Store, opts Options) (*Graph[S], error) {
	errs := slices.Clone(b.errs)
	known := func(n string) bool { return n == End || b.nodes[n] != nil }
	for from, tos := range b.edges {
		if from != Start && b.nodes[from] == nil {
			errs = append(errs, fmt.Errorf("edge from unknown node %q", from))
		}
		for _, to := range tos {
			if !known(to) {
				errs = append(errs, fmt.Errorf("edge %q → %q: unknown node", from, to))
			}
		}
	}
	for from, r := range b.routes {
		if from != Start && b.nodes[from] == nil {
			errs = append(errs, fmt.Errorf("conditional edge from unknown node %q", from))
		}
		for _, to := range r.targets {
			if !known(to) {
				errs = append(errs, fmt.Errorf("conditional edge %q → %q: unknown node", from, to))
			}
		}
	}
	if len(b.edges[Start]) == 0 && b.routes[Start].fn == nil {
		errs = append(errs, fmt.Errorf("no edge from Start"))
	}
	for _, n := range slices.Concat(opts.InterruptBefore, opts.InterruptAfter) {
		if b.nodes[n] == nil {
			errs = append(errs, fmt.Errorf("interrupt at unknown node %q", n))
		}
	}
	for _, j := range b.joins {
		for _, n := range append(slices.Clone(j.sources), j.target) {
			if b.nodes[n] == nil {
				errs = append(errs, fmt.Errorf("join %s: unknown node %q", j.key, n))
			}
		}
	}
	if len(b.reducers) > 0 {
		t := reflect.TypeFor[S]()
		for name, r := range b.reducers {
			f, ok := reflect.StructField{}, false
			if t.Kind() == reflect.Struct {
				f, ok = t.FieldByName(name)
			}
			switch {
			case !ok || !f.IsExported() || len(f.Index) != 1:
				errs = append(errs, fmt.Errorf("reducer for %q: the state has no such exported field", name))
			case f.Type != r.typ:
				errs = append(errs, fmt.Errorf("reducer for %q: the field is a %s, the reducer merges %s", name, f.Type, r.typ))
			}
		}
	}
	if store == nil {
		errs = append(errs, fmt.Errorf("no store"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("compile graph: %w", errors.Join(errs...))
	}
	g := &Graph[S]{
		nodes:      b.nodes,
		edges:      b.edges,
		routes:     b.routes,
		joins:      b.joins,
		reducers:   b.reducers,
		subs:       b.subs,
		dependsOn:  b.dependsOn,
		store:      store,
		before:     opts.InterruptBefore,
		after:      opts.InterruptAfter,
		now:        opts.Now,
		newID:      opts.NewID,
		mergeSaves: opts.MergeSaves,
		cache:      newStateCache[S](opts.CacheThreads),
	}
	g.fp = g.fingerprint(opts.Parts, opts.StateVersion)
	if g.now == nil {
		g.now = time.Now
	}
	if g.newID == nil {
		g.newID = randomID
	}
	return g, nil
}
