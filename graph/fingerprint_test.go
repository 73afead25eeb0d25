package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/interrupt"
)

// deployment is one version of a graph: a → gate → done, gate pausing
// until approved, with the tool "x" its pause depends on.
type deployment struct {
	parts        map[string]string
	stateVersion int
	extraNode    bool   // a new node off the paused path
	gateTo       string // where gate leads
}

func (d deployment) compile(t *testing.T, store graph.Store, c *counter) *graph.Graph[state] {
	t.Helper()
	gate := func(_ context.Context, s *state, _ graph.SaveFunc) error {
		if !s.Approved {
			return interrupt.New(interrupt.Info{Reason: "approval"})
		}
		s.Visits = append(s.Visits, "gate")
		return nil
	}
	to := d.gateTo
	if to == "" {
		to = "done"
	}
	b := graph.New[state]().
		AddNode("a", c.visit("a")).AddNode("gate", gate).AddNode("done", c.visit("done")).AddNode("other", c.visit("other")).
		AddEdge(graph.Start, "a").AddEdge("a", "gate").AddEdge("gate", to).AddEdge("done", graph.End).AddEdge("other", graph.End).
		ResumeDependsOn(func(s *state) []string {
			if !s.Approved {
				return []string{"tool:x"}
			}
			return nil
		})
	if d.extraNode {
		b.AddNode("audit", c.visit("audit")).AddEdge("audit", "done")
	}
	g, err := b.Compile(store, graph.Options{Parts: d.parts, StateVersion: d.stateVersion})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestFingerprintRulesAcrossADeploy(t *testing.T) {
	t.Parallel()
	v1 := deployment{parts: map[string]string{"tool:x": "schema-1"}}
	tests := []struct {
		name    string
		next    deployment
		changes []string // empty: compatible
	}{
		{"same graph", v1, nil},
		{"a new tool and a new node off the paused path", deployment{parts: map[string]string{"tool:x": "schema-1", "tool:y": "schema-9"}, extraNode: true}, nil},
		{"the pending call's tool schema changed", deployment{parts: map[string]string{"tool:x": "schema-2"}}, []string{"tool:x changed"}},
		{"the pending call's tool was removed", deployment{}, []string{"tool:x was removed"}},
		{"the paused node's edges changed", deployment{parts: v1.parts, gateTo: "other"}, []string{`node "gate" changed`}},
		{"the state's format changed", deployment{parts: v1.parts, stateVersion: 2}, []string{"the state's format changed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := newStore()
			var c counter
			old := v1.compile(t, store, &c)
			paused, err := old.Start(ctx, "t", state{}, graph.RunConfig{})
			if err != nil || paused.Status() != graph.Paused {
				t.Fatalf("Start() = %v, %v; want paused", paused, err)
			}
			if fp := paused.Checkpoint.Fingerprint; fp == nil || fp.Parts["tool:x"] != "schema-1" || fp.Nodes["gate"] == "" {
				t.Fatalf("paused checkpoint fingerprint = %+v, want the gate node and tool:x", fp)
			}
			g := tt.next.compile(t, store, &c)
			res, err := g.Resume(ctx, "t", approve)
			if len(tt.changes) == 0 {
				if err != nil || res.Status() != graph.Done {
					t.Fatalf("Resume() = %v, %v; want done", res, err)
				}
				return
			}
			var inc *graph.IncompatibleError
			if !errors.As(err, &inc) || !errors.Is(err, graph.ErrIncompatible) {
				t.Fatalf("Resume() = %v, want an *IncompatibleError", err)
			}
			var got []string
			for _, ch := range inc.Changes {
				got = append(got, ch.String())
			}
			if !slices.Equal(got, tt.changes) {
				t.Errorf("changes = %q, want %q", got, tt.changes)
			}
			head, _ := g.State(ctx, "t")
			if head.Checkpoint.ID != paused.Checkpoint.ID || c.get("done") != 0 {
				t.Fatalf("after a refused resume: head %s (want %s), done ran %d; want nothing run or saved", head.Checkpoint.ID, paused.Checkpoint.ID, c.get("done"))
			}
			if tt.next.stateVersion != 0 {
				return
			}
			// Restart re-plans from a node of the graph as it is now.
			res, err = g.Restart(ctx, "t", "a", func(_ context.Context, path graph.NodePath, s *state) error {
				s.Approved = true
				return nil
			})
			if err != nil || res.Status() != graph.Done || c.get("a") != 2 {
				t.Fatalf("Restart() = %v, %v (a ran %d); want done, a run again", res, err, c.get("a"))
			}
		})
	}
}

func TestStopEndsARefusedThread(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore()
	var c counter
	if _, err := (deployment{parts: map[string]string{"tool:x": "1"}}).compile(t, store, &c).Start(ctx, "t", state{}, graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	g := deployment{parts: map[string]string{"tool:x": "2"}}.compile(t, store, &c)
	res, err := g.Stop(ctx, "t", func(_ context.Context, _ graph.NodePath, s *state) error {
		s.Visits = append(s.Visits, "cancelled")
		return nil
	})
	if err != nil || res.Status() != graph.Done || !slices.Equal(res.State.Visits, []string{"a", "cancelled"}) {
		t.Fatalf("Stop() = %v, %v; want done with the note", res, err)
	}
	if _, err := g.Continue(ctx, "t", func(context.Context, graph.NodePath, *state) error { return nil }); err != nil {
		t.Errorf("Continue(after Stop) = %v, want a new pass", err)
	}
}

func TestCheckpointsWithoutFingerprintResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore()
	var c counter
	g := approvalGraph(t, store, &c)
	if _, err := g.Start(ctx, "t", state{}, graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	// The same pause as a checkpoint written before fingerprints existed.
	cp, _ := store.Load(ctx, "t")
	cp.Fingerprint, cp.Version = nil, 1
	cp.Thread, cp.Seq, cp.Parent = "old", 1, ""
	if err := store.Save(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if res, err := g.Resume(ctx, "old", approve); err != nil || res.Status() != graph.Done {
		t.Fatalf("Resume(old checkpoint) = %v, %v; want done", res, err)
	}
}

// Saves that record the fingerprint of the one before share it, and
// each checkpoint still names exactly the nodes its resume runs first
// and the parts its state depends on: after a pause, its approval, and
// steps that change neither.
func TestEachCheckpointCarriesItsOwnFingerprint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore()
	var c counter
	g := deployment{parts: map[string]string{"tool:x": "schema-1"}}.compile(t, store, &c)
	if _, err := g.Start(ctx, "t", state{}, graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	if res, err := g.Resume(ctx, "t", approve); err != nil || res.Status() != graph.Done {
		t.Fatalf("Resume() = %v, %v; want done", res, err)
	}
	hist, err := store.History(ctx, "t")
	if err != nil || len(hist) < 3 {
		t.Fatalf("History() = %d checkpoints, %v; want the run's saves", len(hist), err)
	}
	all := g.Fingerprint()
	for _, cp := range hist {
		want := map[string]string{}
		for _, n := range cp.Next {
			want[n] = all.Nodes[n]
		}
		for _, in := range cp.Interrupts {
			want[in.Path[0]] = all.Nodes[in.Path[0]]
		}
		wantParts := map[string]string{}
		var st state
		if err := json.Unmarshal(cp.State, &st); err != nil {
			t.Fatal(err)
		}
		if !st.Approved && cp.Status != graph.Done {
			wantParts["tool:x"] = "schema-1"
		}
		fp := cp.Fingerprint
		if fp == nil || !maps.Equal(fp.Nodes, want) || !maps.Equal(fp.Parts, wantParts) {
			t.Errorf("checkpoint %d (%s, next %q) has fingerprint %+v; want nodes %v, parts %v", cp.Seq, cp.Status, cp.Next, fp, want, wantParts)
		}
	}
}

// metaChecking is a store that checks, at each save, that the
// checkpoint's JSON without its journal is what json.Marshal writes.
type metaChecking struct {
	graph.Store
	t       *testing.T
	checked int
}

func (s *metaChecking) Save(ctx context.Context, cp *graph.Checkpoint) error {
	got, err := cp.MarshalMeta()
	want, werr := json.Marshal(cp)
	if err != nil || werr != nil || string(got) != string(want) {
		s.t.Errorf("checkpoint %d: MarshalMeta() =\n%s, %v\njson.Marshal:\n%s, %v", cp.Seq, got, err, want, werr)
	}
	s.checked++
	return s.Store.Save(ctx, cp)
}

// The fingerprint saves share is written once and kept: each save's
// JSON, fingerprint included, is still what json.Marshal writes, over
// threads that pause, are approved and finish.
func TestSharedFingerprintsAreWrittenAsJSONMarshalWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &metaChecking{Store: newStore(), t: t}
	var c counter
	g := deployment{parts: map[string]string{"tool:x": "schema-1"}, stateVersion: 2}.compile(t, store, &c)
	for _, thread := range []string{"t", "u"} {
		if _, err := g.Start(ctx, thread, state{}, graph.RunConfig{}); err != nil {
			t.Fatal(err)
		}
		if res, err := g.Resume(ctx, thread, approve); err != nil || res.Status() != graph.Done {
			t.Fatalf("Resume(%s) = %v, %v; want done", thread, res, err)
		}
	}
	if store.checked < 6 {
		t.Fatalf("%d saves checked; want the saves of two runs", store.checked)
	}
}
