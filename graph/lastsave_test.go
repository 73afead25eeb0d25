package graph_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/countersign/countersign/graph"
)

// markingStore records, per save, the checkpoint's status and the mark
// its context carries.
type markingStore struct {
	graph.Store
	mu    sync.Mutex
	saves []string
}

type markKey struct{}

func (m *markingStore) Save(ctx context.Context, cp *graph.Checkpoint) error {
	mark, _ := ctx.Value(markKey{}).(string)
	m.mu.Lock()
	m.saves = append(m.saves, cp.Status.String()+":"+mark)
	m.mu.Unlock()
	return m.Store.Save(ctx, cp)
}

func (m *markingStore) take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.saves
	m.saves = nil
	return out
}

// The hook of WithLastSave is called once per run, for the save that
// pauses or ends it — not for a subgraph's own saves, nor for a step's —
// with the state that save writes, and that save alone is made in the
// context the hook returns.
func TestLastSaveHook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &markingStore{Store: newStore()}
	var sends execLog
	node := func(name string) graph.NodeFunc[split] {
		return func(ctx context.Context, s *split, save graph.SaveFunc) error {
			s.Log = append(s.Log, name)
			if err := save(ctx); err != nil {
				return err
			}
			sends.add(name)
			return nil
		}
	}
	var log execLog
	sub := graph.Nest(docGraph(t, &log),
		func(s *split) doc { return doc{Lines: []string{"x"}} },
		func(s *split, d *doc) { s.Log = append(s.Log, d.Lines...) })
	g, err := graph.New[split]().
		AddNode("a", node("a")).AddSubgraph("d", sub).AddNode("e", node("e")).
		AddEdge(graph.Start, "a").AddEdge("a", "d").AddEdge("d", "e").
		Compile(store, graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	hooked := graph.WithLastSave(ctx, func(ctx context.Context, res *graph.Result[split]) context.Context {
		calls = append(calls, res.Status().String()+" "+res.State.Log[len(res.State.Log)-1])
		return context.WithValue(ctx, markKey{}, "last")
	})

	res, err := g.Start(hooked, "t", split{}, graph.RunConfig{})
	if err != nil || res.Status() != graph.Paused {
		t.Fatalf("Start() = %v, %v; want paused in the subgraph", res, err)
	}
	saves := store.take()
	if !slices.Equal(calls, []string{"paused a"}) {
		t.Errorf("hook calls = %q, want one, for the pause", calls)
	}
	if n := len(saves); n < 2 || saves[n-1] != "paused:last" || slices.Contains(saves[:n-1], "running:last") {
		t.Errorf("saves = %q, want the pause's alone made in the hook's context", saves)
	}

	calls = nil
	res, err = graph.ResumeNested(hooked, g, "t", func(_ context.Context, _ graph.NodePath, d *doc) error {
		d.Reviewed = true
		return nil
	})
	if err != nil || res.Status() != graph.Done {
		t.Fatalf("ResumeNested() = %v, %v; want done", res, err)
	}
	saves = store.take()
	if !slices.Equal(calls, []string{"done e"}) {
		t.Errorf("hook calls = %q, want one, for the end", calls)
	}
	if n := len(saves); saves[n-1] != "done:last" || slices.Contains(saves[:n-1], "running:last") {
		t.Errorf("saves = %q, want the end's alone made in the hook's context", saves)
	}
}
