package agent_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenFile is a paused thread as a store holds it: its latest checkpoint
// and the whole journal.
type goldenFile struct {
	Checkpoint *graph.Checkpoint `json:"checkpoint"`
	Journal    []json.RawMessage `json:"journal"`
}

const goldenPath = "testdata/paused-v1.golden.json"

// TestGoldenCheckpointResumes loads a paused thread written by an earlier
// version of the format and resumes it: threads paused before a deploy
// must still resume after it. Run with -update only when the format
// changes on purpose — and then add the old file's version to the
// upgrade path rather than replacing it.
func TestGoldenCheckpointResumes(t *testing.T) {
	ctx := context.Background()
	if *update {
		writeGolden(t)
	}
	raw, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	var golden goldenFile
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatalf("golden file: %v", err)
	}
	forEachStore(t, func(t *testing.T, newStore func() graph.Store) {
		store := newStore()
		cp := *golden.Checkpoint
		cp.Seq, cp.JournalFrom, cp.Journal = 1, 0, golden.Journal
		if err := store.Save(ctx, &cp); err != nil {
			t.Fatalf("Save(golden) = %v", err)
		}
		f := newFixture(t, store, nil, true)
		res, err := f.g.State(ctx, cp.Thread)
		if err != nil {
			t.Fatalf("State(golden) = %v", err)
		}
		waiting := res.State.Waiting()
		if res.Status() != graph.Paused || len(waiting) != 2 || res.State.Requester != "U_ALICE" {
			t.Fatalf("golden thread = %s, %d waiting, requester %q; want paused with 2 waiting for U_ALICE", res.Status(), len(waiting), res.State.Requester)
		}
		decisions := map[string]agent.Decision{}
		for _, c := range waiting {
			decisions[c.Key] = script[c.Tool]
		}
		res, err = f.g.Resume(ctx, cp.Thread, f.agent.Decide(decisions))
		if err != nil {
			t.Fatalf("Resume(golden) = %v", err)
		}
		if res.Status() != graph.Done || !slices.Equal(f.deploy.Runs(), []string{`{"n":2}`}) || len(f.delete.Runs()) != 0 {
			t.Errorf("after resuming the golden thread: %s, deploy runs %v, delete runs %v", res.Status(), f.deploy.Runs(), f.delete.Runs())
		}
		if want := "Done. lookup → ran lookup {\"n\":1} | deploy → ran deploy {\"n\":2} | delete → Rejected by user U_BOB: too risky"; res.State.Answer() != want {
			t.Errorf("answer = %q, want %q", res.State.Answer(), want)
		}
	})
}

// writeGolden runs the three-call conversation to its first pause with a
// fixed clock and fixed IDs, and writes the thread out.
func writeGolden(t *testing.T) {
	ctx := context.Background()
	store := graph.NewMemoryStore(graph.MemoryOptions{})
	n := 0
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	tools := newFixture(t, store, nil, true).reg
	a, err := agent.New(&agenttest.Planner{Plan: threeCalls}, tools, store, agent.Options{
		Graph: graph.Options{
			Now:   func() time.Time { return now },
			NewID: func() string { n++; return fmt.Sprintf("cp-%03d", n) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Graph().Start(ctx, "T1:C1:1700000000.000100", agent.NewState("T1:C1:1700000000.000100", "U_ALICE", "C1", "ship it"), graph.RunConfig{})
	if err != nil || res.Status() != graph.Paused {
		t.Fatalf("Start() = %v, %v", res, err)
	}
	cp, err := store.Load(ctx, "T1:C1:1700000000.000100")
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(goldenFile{Checkpoint: cp.Meta(), Journal: cp.Journal}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(goldenPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenPath, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
