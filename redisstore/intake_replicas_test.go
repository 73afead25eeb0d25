package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// TestIntakeStepsWaitForReplicas: with Replicas set, each step of the
// intake after a request is acknowledged — a reply kept for its
// conversation's first save, or taken back; the request let go of,
// taken (by the start that carries it on, or by the intake's look),
// updated, its hold renewed, said to be started — returns only once a
// replica has it, and fails with ErrNotReplicated, rather than let the
// bot go on, when no replica acknowledges it: a failover to a replica
// without the step would have the request lost, or carried on twice. A
// step that writes nothing (a reply not kept: the thread's start holds
// its lease) is answered as the master has it.
func TestIntakeStepsWaitForReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWithReplica(t, "intakewait")
	replica, rdb, onReplica, prefix, s, stalled := w.replica, w.rdb, w.onReplica, w.prefix, w.s, w.stalled
	token := func(id string) string { return onReplica.Get(ctx, prefix+":{intake}:tok:"+id).Val() }
	dueOnReplica := func(id string) bool {
		return onReplica.ZScore(ctx, prefix+":{intake}:due", id).Err() == nil
	}
	now := time.Now()
	later := now.Add(time.Minute)

	// Each step, acknowledged, is on the replica when it returns.
	if ok, err := s.Accept(ctx, "r1", "tok1", []byte(`{"kind":"reply"}`), later, time.Hour); !ok || err != nil {
		t.Fatalf("Accept() = %v, %v", ok, err)
	}
	if held, err := s.HoldIntake(ctx, map[string]string{"r1": "tok1"}, later); !held["r1"] || err != nil {
		t.Errorf("HoldIntake() = %v, %v; want r1 held", held, err)
	}
	if ok, err := s.UpdateIntake(ctx, "r1", "tok1", []byte(`{"kind":"reply","kept_until":1}`), later); !ok || err != nil {
		t.Errorf("UpdateIntake() = %v, %v; want updated", ok, err)
	}
	if let, _, err := s.LetGoIntake(ctx, "r1", "tok1", []byte(`{"kind":"reply","kept_until":2}`), later, later); !let || err != nil {
		t.Errorf("LetGoIntake() = %v, %v; want let go", let, err)
	}
	if got := token("r1"); !strings.HasPrefix(got, "-") {
		t.Errorf("the replica has r1's token %q once LetGoIntake returned, want it let go of (\"-…\")", got)
	}
	if rec, err := s.TakeIntake(ctx, "r1", "tok2", later); rec == nil || err != nil {
		t.Errorf("TakeIntake() = %q, %v; want the record", rec, err)
	}
	if got := token("r1"); got != "tok2" {
		t.Errorf("the replica has r1's token %q once TakeIntake returned, want tok2", got)
	}
	if err := s.Started(ctx, "r1", "tok2"); err != nil {
		t.Errorf("Started() = %v", err)
	}
	if dueOnReplica("r1") {
		t.Errorf("r1 is still due on the replica once Started returned")
	}
	if kept, err := s.KeepReply(ctx, "T1:C1:1.0", []byte(`{"by":"U1","text":"hi"}`), time.Minute); kept != runner.KeptReply || err != nil {
		t.Errorf("KeepReply() = %v, %v; want kept", kept, err)
	}
	if n := onReplica.LLen(ctx, prefix+":{T1:C1:1.0}:kept").Val(); n != 1 {
		t.Errorf("the replica keeps %d replies once KeepReply returned, want 1", n)
	}
	if started, err := s.TakeBackReply(ctx, "T1:C1:1.0", []byte(`{"by":"U1","text":"hi"}`)); started || err != nil {
		t.Errorf("TakeBackReply() = %v, %v; want taken back", started, err)
	}
	if n := onReplica.LLen(ctx, prefix+":{T1:C1:1.0}:kept").Val(); n != 0 {
		t.Errorf("the replica keeps %d replies once TakeBackReply returned, want none", n)
	}
	// Requests for the steps made with the replica stopped.
	if ok, err := s.Accept(ctx, "r2", "tok1", []byte(`{"kind":"reply"}`), later, time.Hour); !ok || err != nil {
		t.Fatalf("Accept(r2) = %v, %v", ok, err)
	}
	if ok, err := s.Accept(ctx, "r3", "tok1", []byte(`{"kind":"reply"}`), now.Add(-time.Second), time.Hour); !ok || err != nil {
		t.Fatalf("Accept(r3) = %v, %v", ok, err)
	}
	if err := rdb.Set(ctx, prefix+":{T1:C1:2.0}:lease", "start", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	replica.Pause()
	defer replica.Resume()
	notReplicated := func(step string, err error) {
		t.Helper()
		if !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Errorf("%s with the replica stopped = %v, want ErrNotReplicated", step, err)
		}
	}
	_, err := stalled.HoldIntake(ctx, map[string]string{"r2": "tok1"}, later)
	notReplicated("HoldIntake", err)
	_, err = stalled.UpdateIntake(ctx, "r2", "tok1", []byte(`{"kind":"reply"}`), later)
	notReplicated("UpdateIntake", err)
	_, _, err = stalled.LetGoIntake(ctx, "r2", "tok1", []byte(`{"kind":"reply"}`), later, later)
	notReplicated("LetGoIntake", err)
	_, err = stalled.TakeIntake(ctx, "r2", "tok3", later)
	notReplicated("TakeIntake", err)
	notReplicated("Started", stalled.Started(ctx, "r2", "tok3"))
	_, err = stalled.DueIntake(ctx, "tok4", now, later, 10)
	notReplicated("DueIntake", err)
	_, err = stalled.KeepReply(ctx, "T1:C1:3.0", []byte(`{"by":"U1","text":"hi"}`), time.Minute)
	notReplicated("KeepReply", err)
	_, err = stalled.TakeBackReply(ctx, "T1:C1:3.0", []byte(`{"by":"U1","text":"hi"}`))
	notReplicated("TakeBackReply", err)
	if kept, err := stalled.KeepReply(ctx, "T1:C1:2.0", []byte(`{"by":"U1","text":"hi"}`), time.Minute); kept != runner.KeptNot || err != nil {
		t.Errorf("KeepReply(a thread whose lease is held) with the replica stopped = %v, %v; want not kept (nothing written), no error", kept, err)
	}
}
