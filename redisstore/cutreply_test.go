package redisstore_test

import (
	"context"
	"crypto/rand"
	"slices"
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
	t.Parallel()
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
	t.Parallel()
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

// TestSaveWhoseAnswerIsCut: a run's save — with or without the call's
// execution for the audit trail — runs in Redis and its answer is lost;
// go-redis sends it again. The retry finds the head at its own
// checkpoint: the save succeeds, as the first attempt did, and the
// execution is in the trail once. Taken for a conflict, the run would
// stop with its call saved running.
func TestSaveWhoseAnswerIsCut(t *testing.T) {
	t.Parallel()
	for _, audited := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "audited"}[audited], func(t *testing.T) {
			ctx := context.Background()
			rdb, cutter := redistest.CutClient(t, "CUTME")
			store := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("cut-save")})
			thread := uniqueName("T1:C1")
			token := runner.NewLeaseToken("A")
			first := firstCheckpoint(thread, "ship")
			if _, err := firstSave(ctx, store, first, token, time.Time{}, nil); err != nil {
				t.Fatal(err)
			}
			var sa *runner.SaveAudit
			if audited {
				sa = &runner.SaveAudit{Records: []map[string]string{{"event": "execution", "tool": "deploy", "thread": thread}}}
			}
			second := nextCheckpoint(first, "running CUTME")
			cutter.Arm()
			err := store.Save(runner.WithSaveAudit(graph.WithFence(ctx, token), sa), second)
			if cutter.Cuts() != 1 {
				t.Fatalf("%d answers were cut, want 1: the test does not test anything", cutter.Cuts())
			}
			if err != nil {
				t.Fatalf("Save with its answer cut = %v; want saved: the retry is its own first attempt", err)
			}
			if got, err := store.Load(ctx, thread); err != nil || got.ID != second.ID || len(got.Journal) != second.JournalLen {
				t.Fatalf("Load = %+v, %v; want the save's checkpoint with its journal written once", got, err)
			}
			if err := store.Save(graph.WithFence(ctx, token), nextCheckpoint(second, "ran")); err != nil {
				t.Errorf("the run's next save = %v, want it saved", err)
			}
			entries, err := store.AuditEntries(ctx, "", time.Time{}, 10)
			want := 0
			if audited {
				want = 1
				if sa.Pending() {
					t.Error("the execution's entry is not reported appended: the runner would append it again")
				}
			}
			if err != nil || len(entries) != want {
				t.Errorf("audit entries = %v, %v; want %d", entries, err, want)
			}
		})
	}
}

// TestClosingSaveWhoseAnswerIsCut: a run's last save, which also ends
// its session (the lease let go, the wake-up set, the outcome audited),
// runs in Redis and its answer is lost; go-redis sends it again. The
// retry finds the head at its own checkpoint and the lease gone: it is
// its first attempt's, and the save succeeds, with the outcome in the
// trail once. So too for a start's first save that pauses or answers.
func TestClosingSaveWhoseAnswerIsCut(t *testing.T) {
	t.Parallel()
	for _, first := range []bool{true, false} {
		t.Run(map[bool]string{true: "first", false: "later"}[first], func(t *testing.T) {
			ctx := context.Background()
			rdb, cutter := redistest.CutClient(t, "CUTME")
			store := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("cut-close")})
			thread := uniqueName("T1:C1")
			token := runner.NewLeaseToken("A")
			wake := time.Now().Add(3 * time.Hour)
			l := &runner.LastSave{Closing: runner.Closing{Thread: thread, Token: token, Answered: -1, Schedule: true, Wake: wake,
				Audit: []map[string]string{{"event": "outcome", "tool": "deploy", "outcome": "done", "thread": thread}}}}
			cp := firstCheckpoint(thread, "ship CUTME")
			if !first {
				if _, err := firstSave(ctx, store, firstCheckpoint(thread, "ship"), token, time.Time{}, nil); err != nil {
					t.Fatal(err)
				}
				cp = nextCheckpoint(firstCheckpoint(thread, "ship"), "done CUTME")
			}
			cp.Status = graph.Done
			cutter.Arm()
			var err error
			if first {
				var f *runner.FirstSave
				f, err = firstSave(ctx, store, cp, token, time.Time{}, l)
				if err == nil && !f.Taken() {
					t.Error("the first save is not reported as having taken the lease")
				}
			} else {
				err = store.Save(runner.WithLastSave(graph.WithFence(ctx, token), l), cp)
			}
			if cutter.Cuts() != 1 {
				t.Fatalf("%d answers were cut, want 1: the test does not test anything", cutter.Cuts())
			}
			if err != nil {
				t.Fatalf("closing save with its answer cut = %v; want saved: the retry is its own first attempt", err)
			}
			if got, err := store.Load(ctx, thread); err != nil || got.ID != cp.ID || len(got.Journal) != cp.JournalLen {
				t.Fatalf("Load = %+v, %v; want the save's checkpoint with its journal written once", got, err)
			}
			if tok, err := store.AcquireLease(ctx, thread, "B", time.Minute); tok == "" || err != nil {
				t.Errorf("AcquireLease after the session ended = %q, %v; want the lease free", tok, err)
			}
			if due, _ := store.Due(ctx, wake.Add(time.Minute), 10); !slices.Contains(due, thread) {
				t.Errorf("Due at the session's wake-up = %v; want the thread", due)
			}
			entries, err := store.AuditEntries(ctx, "", time.Time{}, 10)
			if err != nil || len(entries) != 1 || entries[0].Fields["event"] != "outcome" {
				t.Errorf("audit entries = %v, %v; want the outcome once", entries, err)
			}
		})
	}
}
