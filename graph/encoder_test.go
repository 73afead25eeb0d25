package graph_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/countersign/countersign/graph"
)

// tally is a state that writes and reads its own JSON
// (graph.StateEncoder, graph.StateDecoder), and counts how often it
// reads it.
type tally struct {
	N int `json:"n"`
	// Fail makes AppendJSON fail.
	Fail bool `json:"-"`

	encoded *int
}

var (
	errTally = errors.New("tally cannot be encoded")
	decoded  atomic.Int64
)

func (s *tally) DecodeJSON(data []byte) error {
	decoded.Add(1)
	n, prefixed := strings.CutPrefix(string(data), `{"n":`)
	n, suffixed := strings.CutSuffix(n, "}")
	if !prefixed || !suffixed {
		return fmt.Errorf("tally %s", data)
	}
	var err error
	s.N, err = strconv.Atoi(n)
	return err
}

func (s *tally) AppendJSON(b []byte) ([]byte, error) {
	if s.Fail {
		return nil, errTally
	}
	if s.encoded != nil {
		*s.encoded++
	}
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, int64(s.N), 10)
	return append(b, '}'), nil
}

// A state that writes its own JSON is saved as it writes it, and read
// back by its own reader; one whose encoding fails is not saved.
func TestStateWritesAndReadsItsOwnJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore()
	g, err := graph.New[tally]().
		AddNode("add", func(_ context.Context, s *tally, _ graph.SaveFunc) error { s.N += 2; return nil }).
		AddEdge(graph.Start, "add").AddEdge("add", graph.End).
		Compile(store, graph.Options{InterruptBefore: []string{"add"}})
	if err != nil {
		t.Fatal(err)
	}
	encoded := 0
	res, err := g.Start(ctx, "t1", tally{N: 40, encoded: &encoded}, graph.RunConfig{})
	if err != nil || res.Status() != graph.Paused {
		t.Fatalf("Start() = %v, %v; want paused", res, err)
	}
	if encoded == 0 {
		t.Errorf("Start() saved without AppendJSON")
	}
	cp, err := store.Load(ctx, "t1")
	if err != nil || string(cp.State) != `{"n":40}` {
		t.Fatalf("stored state = %s, %v; want {\"n\":40}", cp.State, err)
	}
	before := decoded.Load()
	res, err = g.Resume(ctx, "t1", func(context.Context, graph.NodePath, *tally) error { return nil })
	if err != nil || res.Status() != graph.Done || res.State.N != 42 {
		t.Fatalf("Resume() = %+v, %v; want done with n 42", res, err)
	}
	if decoded.Load() == before {
		t.Errorf("Resume() read the state without DecodeJSON")
	}
	if cp, err := store.Load(ctx, "t1"); err != nil || string(cp.State) != `{"n":42}` {
		t.Errorf("stored state = %s, %v; want {\"n\":42}", cp.State, err)
	}

	if _, err := g.Start(ctx, "t2", tally{Fail: true}, graph.RunConfig{}); !errors.Is(err, errTally) {
		t.Errorf("Start() of a state that cannot be encoded = %v, want %v", err, errTally)
	}
	if _, err := store.Load(ctx, "t2"); !errors.Is(err, graph.ErrNoCheckpoint) {
		t.Errorf("Load() of a thread whose state could not be encoded = %v, want %v", err, graph.ErrNoCheckpoint)
	}
}
