package graph_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/countersign/countersign/graph"
)

// finalErr is an error that says whether running again can help, as a
// model client's error does.
type finalErr bool

func (e finalErr) Error() string { return fmt.Sprintf("final=%v", bool(e)) }
func (e finalErr) Final() bool   { return bool(e) }

func TestIsFinal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("model unavailable"), false},
		{"final", finalErr(true), true},
		{"says not final", finalErr(false), false},
		{"wrapped", fmt.Errorf("model m: %w", finalErr(true)), true},
		{"in a node error", &graph.NodeError{Node: "model", Err: fmt.Errorf("model m: %w", finalErr(true))}, true},
		{"joined after one that is not", errors.Join(finalErr(false), fmt.Errorf("x: %w", finalErr(true))), true},
		{"joined, none", errors.Join(errors.New("a"), finalErr(false)), false},
	}
	for _, tt := range tests {
		if got := graph.IsFinal(tt.err); got != tt.want {
			t.Errorf("%s: IsFinal(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// A failure that running the node again cannot fix is saved as final, and
// reads back so from the store (another process, or after a restart);
// any other failure is not.
func TestFinalFailureIsSaved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name     string
		err      error
		parallel bool
		want     bool
	}{
		{"final", fmt.Errorf("model m: %w", finalErr(true)), false, true},
		{"plain", errors.New("model unavailable"), false, false},
		{"final in a step of several", finalErr(true), true, true},
		{"plain in a step of several", errors.New("tool unavailable"), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore()
			compile := func() *graph.Graph[state] {
				var c counter
				b := graph.New[state]().AddNode("good", c.visit("good")).
					AddNode("bad", func(context.Context, *state, graph.SaveFunc) error { return tt.err }).
					AddEdge(graph.Start, "bad").AddEdge("bad", graph.End)
				if tt.parallel {
					b = b.AddEdge(graph.Start, "good").AddEdge("good", graph.End).AddReducer("Visits", graph.Append[string]())
				}
				g, err := b.Compile(store, graph.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return g
			}
			res, err := compile().Start(ctx, "t", state{}, graph.RunConfig{})
			if err == nil || res.Status() != graph.Failed || res.Checkpoint.Final != tt.want {
				t.Fatalf("Start() = %v, status %s, final %v; want failed, final %v", err, res.Status(), res.Checkpoint.Final, tt.want)
			}
			got, err := compile().State(ctx, "t")
			if err != nil || got.Status() != graph.Failed || got.Checkpoint.Final != tt.want || got.Checkpoint.Error == "" {
				t.Fatalf("State() = %v, status %s, final %v, error %q; want failed, final %v, with the error",
					err, got.Status(), got.Checkpoint.Final, got.Checkpoint.Error, tt.want)
			}
		})
	}
}
