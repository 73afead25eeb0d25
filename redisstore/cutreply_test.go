package redisstore_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// TestFirstOrRepeatSurvivesACutAnswer: the writes whose answer says
// "first" or "repeat" — Dedup of a click or an event, Accept of a
// request — are retried by go-redis when their answer is lost. The
// retry finds what its own first attempt wrote, and must still say
// "first": taken for a repeated delivery, the click is dropped with a 200
// to Slack and no answer to the person.
func TestFirstOrRepeatSurvivesACutAnswer(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		write func(s *redisstore.Store) (bool, error)
	}{
		{"dedup", func(s *redisstore.Store) (bool, error) {
			return s.Dedup(ctx, "action:U0BOB:1700000000.1:approve", time.Minute)
		}},
		{"accept", func(s *redisstore.Store) (bool, error) {
			return s.Accept(ctx, "event:Ev0CUT", rand.Text(), []byte(`{"kind":"reply"}`), time.Now().Add(15*time.Second), time.Minute)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb, cutter := redistest.CutClient(t, "CUTME")
			s := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("cut-" + tt.name + "-CUTME")})
			cutter.Arm()
			first, err := tt.write(s)
			if cutter.Cuts() != 1 {
				t.Fatalf("%d answers were cut, want 1: the test does not test anything", cutter.Cuts())
			}
			if err != nil || !first {
				t.Fatalf("%s with its answer cut once = %v, %v; want true: the retry took its own write for a repeat", tt.name, first, err)
			}
			if again, err := tt.write(s); err != nil || again {
				t.Errorf("%s of a real repeat = %v, %v; want false", tt.name, again, err)
			}
		})
	}
}

// TestFirstSaveWhoseAnswerIsCut: a start's first save, which creates the
// thread, takes its lease and appends the call's execution to the audit
// trail, runs in Redis and its answer is lost; go-redis sends the script
// again. The retry finds the thread its first attempt created, under
// this save's lease: it is that attempt's, and the save succeeds — the
// start goes on under its lease — with the execution in the trail once.
// Taken for another start's thread, the start would stop with its call
// saved running and nobody to send it.
func TestFirstSaveWhoseAnswerIsCut(t *testing.T) {
	ctx := context.Background()
	rdb, cutter := redistest.CutClient(t, "CUTME")
	store := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("cut-first")})
	thread := uniqueName("T1:C1")
	token := runner.NewLeaseToken("A")
	sa := &runner.SaveAudit{Records: []map[string]string{{"event": "execution", "tool": "deploy", "thread": thread}}}
	cutter.Arm()
	f, err := firstSave(runner.WithSaveAudit(ctx, sa), store, firstCheckpoint(thread, "ship CUTME"), token, time.Now().Add(time.Hour), nil)
	if cutter.Cuts() != 1 {
		t.Fatalf("%d answers were cut, want 1: the test does not test anything", cutter.Cuts())
	}
	if err != nil || !f.Taken() {
		t.Fatalf("first save with its answer cut = %v (taken %v); want saved: the retry is its own first attempt", err, f.Taken())
	}
	if ok, err := store.RenewLease(ctx, thread, token, time.Minute); !ok || err != nil {
		t.Errorf("RenewLease(the start's token) = %v, %v; want the lease the first attempt took", ok, err)
	}
	if err := store.Save(graph.WithFence(ctx, token), nextCheckpoint(firstCheckpoint(thread, "ship CUTME"), "ran")); err != nil {
		t.Errorf("the run's next save = %v, want it saved under the start's lease", err)
	}
	if sa.Pending() {
		t.Error("the execution's entry is not reported appended: the runner would append it again")
	}
	entries, err := store.AuditEntries(ctx, "", time.Time{}, 10)
	if err != nil || len(entries) != 1 || entries[0].Fields["event"] != "execution" {
		t.Errorf("audit entries = %v, %v; want the execution once", entries, err)
	}
}
