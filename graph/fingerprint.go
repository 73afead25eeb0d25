package graph

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Fingerprint identifies the graph a checkpoint was written by, in the
// parts a resume depends on. See the package doc for the compatibility
// rules. Every checkpoint of every thread carries one, so its JSON names
// and hashes (12 hex digits of SHA-256) are short.
type Fingerprint struct {
	// Graph is a hash of the whole graph: every node's hash, the edges
	// from Start, every part and the state version. Equal hashes mean the
	// checkpoint resumes as it was written.
	Graph string `json:"g"`
	// Nodes holds the hashes of the nodes the checkpoint's resume runs
	// first: the step's nodes and the nodes that paused.
	Nodes map[string]string `json:"n,omitempty"`
	// Parts holds the parts (Options.Parts) the state depends on
	// (Builder.ResumeDependsOn), e.g. the schemas of pending tool calls.
	Parts map[string]string `json:"p,omitempty"`
	// StateVersion is Options.StateVersion.
	StateVersion int `json:"sv,omitempty"`

	// json is the fingerprint's JSON, made once for one that stamp
	// keeps for many checkpoints (nil: made at each save). Those are
	// shared, and nothing changes them.
	json []byte
}

// Change is one difference between the graph that wrote a checkpoint and
// the graph asked to resume it.
type Change struct {
	// Kind is "node", "part" or "state".
	Kind string
	// Name is the node's or the part's name ("" for the state).
	Name string
	// Removed: the node or part is gone; otherwise it changed.
	Removed bool
}

func (c Change) String() string {
	what := "changed"
	if c.Removed {
		what = "was removed"
	}
	switch c.Kind {
	case "node":
		return fmt.Sprintf("node %q %s", c.Name, what)
	case "part":
		return fmt.Sprintf("%s %s", c.Name, what)
	}
	return "the state's format changed"
}

// ErrIncompatible matches every *IncompatibleError.
var ErrIncompatible = errors.New("checkpoint written by an incompatible graph")

// IncompatibleError says that a thread's checkpoint was written by a graph
// that differs from this one in something its resume depends on. Nothing
// ran and nothing was saved; Restart and Stop are the ways on.
type IncompatibleError struct {
	Thread  string
	Changes []Change
}

func (e *IncompatibleError) Error() string {
	var parts []string
	for _, c := range e.Changes {
		parts = append(parts, c.String())
	}
	return fmt.Sprintf("%v: %s", ErrIncompatible, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrIncompatible) true.
func (e *IncompatibleError) Is(target error) bool { return target == ErrIncompatible }

// Fingerprint returns the graph's fingerprint with every node and part.
func (g *Graph[S]) Fingerprint() Fingerprint {
	fp := *g.fp
	fp.Nodes, fp.Parts = maps.Clone(fp.Nodes), maps.Clone(fp.Parts)
	return fp
}

// fingerprint computes the full fingerprint of a compiled graph.
func (g *Graph[S]) fingerprint(parts map[string]string, stateVersion int) *Fingerprint {
	fp := &Fingerprint{Nodes: map[string]string{}, Parts: maps.Clone(parts), StateVersion: stateVersion}
	for name := range g.nodes {
		h := sha256.New()
		fmt.Fprintf(h, "node %q\n", name)
		for _, to := range slices.Sorted(slices.Values(g.edges[name])) {
			fmt.Fprintf(h, "edge %q\n", to)
		}
		if r, ok := g.routes[name]; ok {
			fmt.Fprintf(h, "route %q\n", slices.Sorted(slices.Values(r.targets)))
		}
		for _, j := range g.joins {
			if slices.Contains(j.sources, name) || j.target == name {
				fmt.Fprintf(h, "join %q\n", j.key)
			}
		}
		fmt.Fprintf(h, "before %v after %v\n", slices.Contains(g.before, name), slices.Contains(g.after, name))
		if sub := g.subs[name]; sub != nil {
			fmt.Fprintf(h, "subgraph %s\n", sub.fingerprint())
		}
		fp.Nodes[name] = hex.EncodeToString(h.Sum(nil))[:12]
	}
	h := sha256.New()
	for _, n := range slices.Sorted(maps.Keys(fp.Nodes)) {
		fmt.Fprintf(h, "%q %s\n", n, fp.Nodes[n])
	}
	fmt.Fprintf(h, "start %q\n", g.edges[Start])
	if r, ok := g.routes[Start]; ok {
		fmt.Fprintf(h, "start route %q\n", slices.Sorted(slices.Values(r.targets)))
	}
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		fmt.Fprintf(h, "part %q %q\n", p, parts[p])
	}
	fmt.Fprintf(h, "state %d\n", stateVersion)
	fp.Graph = hex.EncodeToString(h.Sum(nil))[:12]
	return fp
}

// stamp returns the fingerprint to record in cp: the graph's hash, the
// hashes of the nodes cp's resume runs first, and the parts s depends on.
// It returns prev itself when that is the one it would make (the run's
// saves mostly record the same): fingerprints are never changed once
// made, so checkpoints may share one.
func (g *Graph[S]) stamp(cp *Checkpoint, s *S, prev *Fingerprint) *Fingerprint {
	var parts []string
	if g.dependsOn != nil && cp.Status != Done {
		parts = g.dependsOn(s)
	}
	if g.stamped(prev, cp, parts) {
		return prev
	}
	key, common := g.stampKeyOf(cp, parts)
	if common {
		if fp, ok := g.stamps.Load(key); ok {
			return fp.(*Fingerprint)
		}
	}
	fp := g.newStamp(cp, parts)
	if common && g.numStamps.Load() < maxStamps {
		fp.json = fp.appendJSON(nil) // before any other goroutine sees it
		if kept, loaded := g.stamps.LoadOrStore(key, fp); loaded {
			return kept.(*Fingerprint)
		}
		g.numStamps.Add(1)
	}
	return fp
}

// stampKey names a fingerprint of at most one node and one part.
type stampKey struct {
	node, part string
	hasPart    bool
}

// maxStamps bounds how many fingerprints a graph keeps for stamp: the
// graph's nodes by the parts (a conversation's pending tools) there
// are, far fewer unless tools come and go by the thousand.
const maxStamps = 1024

// stampKeyOf returns the key of the fingerprint stamp makes for cp and
// parts, and whether it has one: at most one node (once or more) and
// one part.
func (g *Graph[S]) stampKeyOf(cp *Checkpoint, parts []string) (stampKey, bool) {
	var key stampKey
	if len(parts) > 1 {
		return key, false
	}
	if len(parts) == 1 {
		key.part, key.hasPart = parts[0], true
	}
	one := true
	g.eachStampedNode(cp, func(n, _ string) {
		if key.node != "" && key.node != n {
			one = false
		}
		key.node = n
	})
	return key, one
}

// newStamp makes the fingerprint stamp returns for cp and parts.
func (g *Graph[S]) newStamp(cp *Checkpoint, parts []string) *Fingerprint {
	fp := &Fingerprint{Graph: g.fp.Graph, StateVersion: g.fp.StateVersion}
	g.eachStampedNode(cp, func(n, h string) {
		if fp.Nodes == nil {
			fp.Nodes = map[string]string{}
		}
		fp.Nodes[n] = h
	})
	for _, p := range parts {
		if fp.Parts == nil {
			fp.Parts = map[string]string{}
		}
		fp.Parts[p] = g.fp.Parts[p] // "" if the graph lacks it: any resume will say so
	}
	return fp
}

// eachStampedNode calls fn with each node cp's resume runs first that the
// graph has, and its hash: the step's nodes, then those that paused. A
// node may come more than once.
func (g *Graph[S]) eachStampedNode(cp *Checkpoint, fn func(n, h string)) {
	for _, n := range cp.Next {
		if h, ok := g.fp.Nodes[n]; ok {
			fn(n, h)
		}
	}
	for _, in := range cp.Interrupts {
		if len(in.Path) > 0 {
			if h, ok := g.fp.Nodes[in.Path[0]]; ok {
				fn(in.Path[0], h)
			}
		}
	}
}

// stamped reports whether fp is what stamp makes for cp and parts: the
// same nodes with the same hashes, and the same parts.
func (g *Graph[S]) stamped(fp *Fingerprint, cp *Checkpoint, parts []string) bool {
	if fp == nil || fp.Graph != g.fp.Graph || fp.StateVersion != g.fp.StateVersion {
		return false
	}
	var seen [8]string
	names, same := seen[:0], true
	g.eachStampedNode(cp, func(n, h string) {
		if got, ok := fp.Nodes[n]; !ok || got != h {
			same = false
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	})
	if !same || len(fp.Nodes) != len(names) {
		return false
	}
	names = seen[:0]
	for _, p := range parts {
		if got, ok := fp.Parts[p]; !ok || got != g.fp.Parts[p] {
			return false
		}
		if !slices.Contains(names, p) {
			names = append(names, p)
		}
	}
	return len(fp.Parts) == len(names)
}

// checkCompatible applies the compatibility rules to a checkpoint's
// fingerprint.
func (g *Graph[S]) checkCompatible(thread string, cp *Checkpoint) error {
	old := cp.Fingerprint
	if old == nil || old.Graph == g.fp.Graph {
		return nil
	}
	var changes []Change
	if old.StateVersion != g.fp.StateVersion {
		changes = append(changes, Change{Kind: "state"})
	}
	for _, n := range slices.Sorted(maps.Keys(old.Nodes)) {
		if h, ok := g.fp.Nodes[n]; !ok {
			changes = append(changes, Change{Kind: "node", Name: n, Removed: true})
		} else if h != old.Nodes[n] {
			changes = append(changes, Change{Kind: "node", Name: n})
		}
	}
	for _, p := range slices.Sorted(maps.Keys(old.Parts)) {
		if h, ok := g.fp.Parts[p]; !ok {
			changes = append(changes, Change{Kind: "part", Name: p, Removed: true})
		} else if h != old.Parts[p] {
			changes = append(changes, Change{Kind: "part", Name: p})
		}
	}
	if len(changes) > 0 {
		return &IncompatibleError{Thread: thread, Changes: changes}
	}
	return nil
}

// checkState applies the one rule that also holds for a run that is over:
// the state's format must be the same.
func (g *Graph[S]) checkState(thread string, old *Fingerprint) error {
	if old != nil && old.StateVersion != g.fp.StateVersion {
		return &IncompatibleError{Thread: thread, Changes: []Change{{Kind: "state"}}}
	}
	return nil
}

// Check reports whether the thread's latest checkpoint can be resumed by
// this graph: nil, or an *IncompatibleError.
func (g *Graph[S]) Check(ctx context.Context, thread string) error {
	cp, err := g.store.Load(ctx, thread)
	if err != nil {
		return fmt.Errorf("check %s: %w", thread, err)
	}
	return g.Compatible(cp)
}

// Compatible applies the compatibility rules to a checkpoint of the
// thread, as Resume and Recover would (a run that is done needs only the
// same state version): nil, or an *IncompatibleError.
func (g *Graph[S]) Compatible(cp *Checkpoint) error {
	if cp.Status == Done {
		return g.checkState(cp.Thread, cp.Fingerprint)
	}
	return g.checkCompatible(cp.Thread, cp)
}
