package graph

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/countersign/countersign/interrupt"
)

// Subgraph is a compiled graph made into a node of a graph over S, with
// Nest, and added with Builder.AddSubgraph.
type Subgraph[S any] interface {
	subgraph() subgraph[S]
}

// subgraph is what the engine does with a subgraph node.
type subgraph[S any] interface {
	// runNested runs (or goes on with) the subgraph for the parent state
	// s. nested is its checkpoint so far (nil: start it); setNested
	// records a new one (nil: the run is over) for the parent's next save.
	runNested(ctx context.Context, s *S, nested json.RawMessage, setNested func(json.RawMessage), save SaveFunc) error
	// answerNested readies a paused or failed subgraph run to go on, as
	// Resume does, and returns its new checkpoint.
	answerNested(ctx context.Context, nested json.RawMessage, ids []string, mod *modifier, prefix NodePath) (json.RawMessage, error)
	// fingerprint identifies the subgraph, for its node's fingerprint.
	fingerprint() string
}

// nestedPause is how a subgraph node tells its graph that the subgraph
// paused, and on what.
type nestedPause struct{ infos []interrupt.Info }

func (p *nestedPause) Error() string {
	return fmt.Sprintf("subgraph paused on %d interrupts", len(p.infos))
}

// nestedCheckpoint is a subgraph's checkpoint as its parent's checkpoint
// holds it: with the whole journal.
type nestedCheckpoint struct {
	*Checkpoint
	Journal []json.RawMessage `json:"journal,omitempty"`
}

// Nest makes g a node of a graph over S. in gives the subgraph's initial
// state from the parent's when the node starts; out applies the
// subgraph's final state to the parent's when the subgraph's run is done.
//
// The subgraph's run is saved inside the parent's checkpoints (one parent
// checkpoint per step of the subgraph), so the parent's history covers
// both levels, and Fork and Recover work from a checkpoint taken inside
// the subgraph. A pause inside the subgraph pauses the parent with the
// full path (node, then the subgraph's path); ResumeNested hands the
// modifier the subgraph's own state. g's store is not used.
func Nest[S, T any](g *Graph[T], in func(*S) T, out func(*S, *T)) Subgraph[S] {
	return &nest[S, T]{g: g, in: in, out: out}
}

type nest[S, T any] struct {
	g   *Graph[T]
	in  func(*S) T
	out func(*S, *T)
}

func (n *nest[S, T]) subgraph() subgraph[S] { return n }

func (n *nest[S, T]) fingerprint() string { return n.g.fp.Graph }

func (n *nest[S, T]) runNested(ctx context.Context, s *S, nested json.RawMessage, setNested func(json.RawMessage), save SaveFunc) error {
	var journal []json.RawMessage
	persist := func(ctx context.Context, cp *Checkpoint) error {
		full := append(slices.Clone(journal[:cp.JournalFrom]), cp.Journal...)
		raw, err := json.Marshal(nestedCheckpoint{Checkpoint: cp, Journal: full})
		if err != nil {
			return fmt.Errorf("encode subgraph checkpoint: %w", err)
		}
		setNested(raw)
		if err := save(ctx); err != nil {
			return err
		}
		journal = full
		return nil
	}
	var r *run[T]
	if nested == nil {
		r = n.g.newRun("", n.in(s), RunConfig{}, persist)
		next, err := n.g.successors(Start, &r.state)
		if err != nil {
			return err
		}
		if err := r.save(ctx, Running, func(cp *Checkpoint) { cp.Next = next }); err != nil {
			return err
		}
	} else {
		var err error
		if r, journal, err = n.decode(nested); err != nil {
			return err
		}
		r.persist = persist
		switch r.cp.Status {
		case Paused:
			return &nestedPause{infos: r.cp.Interrupts}
		case Failed:
			return fmt.Errorf("subgraph failed: %s", r.cp.Error)
		}
	}
	res, err := r.loop(ctx)
	if err != nil {
		return err
	}
	switch res.Status() {
	case Paused:
		return &nestedPause{infos: res.Interrupts()}
	case Done:
		n.out(s, &res.State)
		setNested(nil)
	}
	return nil
}

func (n *nest[S, T]) answerNested(ctx context.Context, nested json.RawMessage, ids []string, mod *modifier, prefix NodePath) (json.RawMessage, error) {
	r, journal, err := n.decode(nested)
	if err != nil {
		return nil, err
	}
	if r.cp.Status != Paused && r.cp.Status != Failed {
		return nested, nil
	}
	if err := r.answer(ctx, ids, mod, prefix); err != nil {
		return nil, err
	}
	var raw json.RawMessage
	r.persist = func(_ context.Context, cp *Checkpoint) error {
		full := append(slices.Clone(journal[:cp.JournalFrom]), cp.Journal...)
		raw, err = json.Marshal(nestedCheckpoint{Checkpoint: cp, Journal: full})
		return err
	}
	if err := r.save(ctx, Running, nil); err != nil {
		return nil, err
	}
	return raw, nil
}

// decode reads a nested checkpoint into a run and its whole journal.
func (n *nest[S, T]) decode(nested json.RawMessage) (*run[T], []json.RawMessage, error) {
	var nc nestedCheckpoint
	if err := json.Unmarshal(nested, &nc); err != nil || nc.Checkpoint == nil {
		return nil, nil, fmt.Errorf("decode subgraph checkpoint: %v", err)
	}
	if err := upgrade(nc.Checkpoint); err != nil {
		return nil, nil, err
	}
	// A subgraph's checkpoint holds its whole journal (persist): one
	// that says it has more or fewer entries than it holds is damaged,
	// and a save would cut the journal at an entry it does not have.
	if nc.JournalLen != len(nc.Journal) {
		return nil, nil, fmt.Errorf("decode subgraph checkpoint %s: journal has %d of %d entries", nc.ID, len(nc.Journal), nc.JournalLen)
	}
	nc.Checkpoint.Journal = nc.Journal
	r := &run[T]{g: n.g}
	if err := r.decode(nc.Checkpoint); err != nil {
		return nil, nil, err
	}
	r.thread = r.cp.Thread
	return r, nc.Journal, nil
}
