package graph_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/countersign/countersign/graph"
)

// unconfirmedSave is a store that writes its n-th save and then says it
// is not confirmed, as redisstore does of a save no replica acknowledged.
type unconfirmedSave struct {
	graph.Store
	n, saves atomic.Int32
}

func (u *unconfirmedSave) Save(ctx context.Context, cp *graph.Checkpoint) error {
	if err := u.Store.Save(ctx, cp); err != nil {
		return err
	}
	if u.saves.Add(1) == u.n.Load() {
		return fmt.Errorf("save checkpoint %s seq %d: 0 of 1 replicas: %w", cp.Thread, cp.Seq, graph.ErrUnconfirmed)
	}
	return nil
}

// A node whose save is written but unconfirmed does not do what the save
// was for; its next save — saying so — follows the unconfirmed one
// instead of conflicting with it, and the run's failure is saved after
// it, holding what that next save wrote.
func TestASaveAfterAnUnconfirmedOneFollowsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	errNotDone := errors.New("not done: the save before it was not confirmed")
	store := &unconfirmedSave{Store: newStore()}
	store.n.Store(2) // the first is the run's start
	g, err := graph.New[state]().AddNode("a", func(ctx context.Context, s *state, save graph.SaveFunc) error {
		s.Tries = 1 // about to do it
		if err := save(ctx); err != nil {
			if !errors.Is(err, graph.ErrUnconfirmed) {
				return err
			}
			s.Tries = 2 // put back: not done
			if err := save(ctx); err != nil {
				return fmt.Errorf("the save after the unconfirmed one: %w", err)
			}
			return errNotDone
		}
		return nil
	}).AddEdge(graph.Start, "a").AddEdge("a", graph.End).Compile(store, graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Start(ctx, "t", state{}, graph.RunConfig{})
	if !errors.Is(err, errNotDone) {
		t.Fatalf("Start() = %v, want the node's %v", err, errNotDone)
	}
	res, err := g.State(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status() != graph.Failed || res.State.Tries != 2 {
		t.Errorf("the thread is %s with tries %d, want failed with the put-back state (tries 2)", res.Status(), res.State.Tries)
	}
}
