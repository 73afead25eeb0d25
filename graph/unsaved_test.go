package graph_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/countersign/countersign/graph"
)

// downAfterFirst is a store that stops answering after its first save.
type downAfterFirst struct {
	graph.Store
	saves atomic.Int32
}

var errDown = errors.New("dial tcp: connection refused")

func (d *downAfterFirst) Save(ctx context.Context, cp *graph.Checkpoint) error {
	if d.saves.Add(1) > 1 {
		return fmt.Errorf("save checkpoint %s seq %d: %w", cp.Thread, cp.Seq, errDown)
	}
	return d.Store.Save(ctx, cp)
}

// A run whose store stops answering fails, and the save of its failure
// fails too. Its error keeps both the node's error and the save's within
// errors.Is's reach, and its text says each once: the save's error is
// not repeated when the node failed on that same save, and a node's own
// error is not lost beside it.
func TestAnUnsavedFailureSaysEachErrorOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	errNode := errors.New("the tool's server went away")
	for _, tc := range []struct {
		name  string
		node  func(context.Context, *state, graph.SaveFunc) error
		is    []error
		texts []string
	}{
		{"the node failed on a save", func(ctx context.Context, _ *state, save graph.SaveFunc) error { return save(ctx) },
			[]error{errDown}, []string{"save checkpoint", "connection refused"}},
		{"the node failed on its own", func(context.Context, *state, graph.SaveFunc) error { return errNode },
			[]error{errNode, errDown}, []string{"save checkpoint", "connection refused", errNode.Error()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, err := graph.New[state]().AddNode("a", tc.node).
				AddEdge(graph.Start, "a").AddEdge("a", graph.End).
				Compile(&downAfterFirst{Store: newStore()}, graph.Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = g.Start(ctx, "t", state{}, graph.RunConfig{})
			if err == nil {
				t.Fatal("Start() = nil with the store down")
			}
			for _, want := range tc.is {
				if !errors.Is(err, want) {
					t.Errorf("Start() = %v, want errors.Is %v", err, want)
				}
			}
			for _, text := range tc.texts {
				if n := strings.Count(err.Error(), text); n != 1 {
					t.Errorf("Start()'s text says %q %d times, want once:\n%s", text, n, err)
				}
			}
		})
	}
}
