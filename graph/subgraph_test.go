package graph_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/interrupt"
)

// doc is a subgraph's state, of another type than its parent's.
type doc struct {
	Lines    []string `json:"lines"`
	Reviewed bool     `json:"reviewed"`
}

// docGraph: draft → review → publish; review pauses until Reviewed.
func docGraph(t *testing.T, log *execLog) *graph.Graph[doc] {
	t.Helper()
	step := func(name string) graph.NodeFunc[doc] {
		return func(_ context.Context, d *doc, _ graph.SaveFunc) error {
			if name == "review" && !d.Reviewed {
				return interrupt.New(interrupt.Info{Reason: "review"})
			}
			d.Lines = append(d.Lines, name)
			log.add("doc/" + name)
			return nil
		}
	}
	g, err := graph.New[doc]().
		AddNode("draft", step("draft")).AddNode("review", step("review")).AddNode("publish", step("publish")).
		AddEdge(graph.Start, "draft").AddEdge("draft", "review").AddEdge("review", "publish").
		Compile(graph.NewMemoryStore(graph.MemoryOptions{}), graph.Options{})
	if err != nil {
		t.Fatalf("Compile(doc) = %v", err)
	}
	return g
}

// parentGraph: prep → doc (the subgraph) → finish.
func parentGraph(t *testing.T, store graph.Store, log *execLog) *graph.Graph[state] {
	t.Helper()
	visit := func(name string) graph.NodeFunc[state] {
		return func(_ context.Context, s *state, _ graph.SaveFunc) error {
			s.Visits = append(s.Visits, name)
			log.add(name)
			return nil
		}
	}
	sub := graph.Nest(docGraph(t, log),
		func(s *state) doc { return doc{Lines: []string{fmt.Sprintf("after %d visits", len(s.Visits))}} },
		func(s *state, d *doc) { s.Visits = append(s.Visits, d.Lines...) })
	g, err := graph.New[state]().
		AddNode("prep", visit("prep")).AddSubgraph("doc", sub).AddNode("finish", visit("finish")).
		AddEdge(graph.Start, "prep").AddEdge("prep", "doc").AddEdge("doc", "finish").
		Compile(store, graph.Options{})
	if err != nil {
		t.Fatalf("Compile(parent) = %v", err)
	}
	return g
}

// review is the modifier a person's answer becomes: it reads the path and
// the subgraph's own state.
func review(_ context.Context, path graph.NodePath, d *doc) error {
	if path.String() != "doc/review" {
		return fmt.Errorf("modifier path = %s, want doc/review", path)
	}
	if len(d.Lines) != 2 || d.Lines[1] != "draft" {
		return fmt.Errorf("modifier got the subgraph state %+v, want the draft", d)
	}
	d.Reviewed = true
	return nil
}

func TestSubgraphInterruptResumesWithPathAndSubgraphState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log execLog
	g := parentGraph(t, newStore(), &log)
	res, err := g.Start(ctx, "t", state{}, graph.RunConfig{})
	if err != nil || res.Status() != graph.Paused {
		t.Fatalf("Start() = %v, %v; want paused inside the subgraph", res, err)
	}
	in := res.Interrupts()
	if len(in) != 1 || NodePathString(in[0].Path) != "doc/review" || in[0].Reason != "review" {
		t.Fatalf("interrupts = %+v, want one at doc/review", in)
	}
	// A modifier of the parent's state cannot answer it for the subgraph.
	if _, err := graph.ResumeNested(ctx, g, "t", func(context.Context, graph.NodePath, *state) error { return nil }); err == nil {
		t.Error("ResumeNested with the parent's state type = nil error, want a type error")
	}
	res, err = graph.ResumeNested(ctx, g, "t", review)
	if err != nil {
		t.Fatalf("ResumeNested() = %v", err)
	}
	want := []string{"prep", "after 1 visits", "draft", "review", "publish", "finish"}
	if res.Status() != graph.Done || !slices.Equal(res.State.Visits, want) {
		t.Fatalf("ResumeNested() = %s %v, want done %v", res.Status(), res.State.Visits, want)
	}
	if runs := log.take(); !slices.Equal(runs, []string{"prep", "doc/draft", "doc/review", "doc/publish", "finish"}) {
		t.Errorf("executions = %v, want each node once", runs)
	}
	// The history covers both levels: checkpoints taken inside the
	// subgraph carry its run.
	hist, err := g.History(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	inside := 0
	for _, cp := range hist {
		if cp.Nested["doc"] != nil {
			inside++
		}
	}
	if inside < 3 {
		t.Errorf("%d checkpoints hold the subgraph's run, want one per subgraph step (3 or more)", inside)
	}
}

// NodePathString spells a path as NodePath does.
func NodePathString(p []string) string { return graph.NodePath(p).String() }

// TestForkInsideSubgraph: forking at every checkpoint, those inside the
// subgraph included, and driving the fork runs exactly what followed.
func TestForkInsideSubgraph(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log execLog
	g := parentGraph(t, newStore(), &log)
	if _, err := g.Start(ctx, "t", state{}, graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	direct, err := driveNested(ctx, g, "t")
	if err != nil {
		t.Fatal(err)
	}
	all := log.take()
	hist, _ := g.History(ctx, "t")
	for i, cp := range hist {
		fork := fmt.Sprintf("fork-%d", i)
		if _, err := g.Fork(ctx, "t", cp.ID, fork); err != nil {
			t.Fatal(err)
		}
		got, err := driveNested(ctx, g, fork)
		if err != nil {
			t.Fatalf("drive(fork at step %d %s) = %v", cp.Step, cp.Status, err)
		}
		if !slices.Equal(got.State.Visits, direct.State.Visits) {
			t.Errorf("fork at step %d visits = %v, want %v", cp.Step, got.State.Visits, direct.State.Visits)
		}
		// Executions are a suffix of the direct run's: nothing repeats.
		ran := log.take()
		if len(ran) > len(all) || !slices.Equal(ran, all[len(all)-len(ran):]) {
			t.Errorf("fork at step %d (%s, nested %v) executed %v, want a suffix of %v", cp.Step, cp.Status, cp.Nested != nil, ran, all)
		}
	}
}

// driveNested runs a thread to the end, answering pauses inside the
// subgraph.
func driveNested(ctx context.Context, g *graph.Graph[state], thread string) (*graph.Result[state], error) {
	for range 20 {
		res, err := g.State(ctx, thread)
		if err != nil {
			return nil, err
		}
		switch res.Status() {
		case graph.Done:
			return res, nil
		case graph.Running:
			_, err = g.Recover(ctx, thread)
		default:
			_, err = graph.ResumeNested(ctx, g, thread, review)
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, errors.New("run did not finish")
}

// TestSubgraphBesideAnotherNode: the subgraph and a plain node run in one
// step; the subgraph pauses, the other node's work is kept, and the
// answer (by interrupt ID) merges both.
func TestSubgraphBesideAnotherNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log execLog
	sub := graph.Nest(docGraph(t, &log),
		func(*state) doc { return doc{Lines: []string{"in"}} },
		func(s *state, d *doc) { s.Visits = append(s.Visits, d.Lines...) })
	g, err := graph.New[state]().
		AddSubgraph("doc", sub).
		AddNode("side", func(_ context.Context, s *state, _ graph.SaveFunc) error {
			s.Visits = append(s.Visits, "side")
			log.add("side")
			return nil
		}).
		AddEdge(graph.Start, "doc").AddEdge(graph.Start, "side").
		AddReducer("Visits", graph.Append[string]()).
		Compile(newStore(), graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Start(ctx, "t", state{}, graph.RunConfig{})
	if err != nil || res.Status() != graph.Paused || len(res.Interrupts()) != 1 {
		t.Fatalf("Start() = %v, %v; want paused on the review", res, err)
	}
	id := res.Interrupts()[0].ID
	res, err = graph.ResumeNested(ctx, g, "t", review, id)
	if err != nil {
		t.Fatalf("ResumeNested(%s) = %v", id, err)
	}
	if want := []string{"in", "draft", "review", "publish", "side"}; res.Status() != graph.Done || !slices.Equal(res.State.Visits, want) {
		t.Fatalf("after the answer: %s %v, want done %v", res.Status(), res.State.Visits, want)
	}
	if runs := log.take(); len(runs) != 4 {
		t.Errorf("executions = %v, want each of the four once", runs)
	}
}
