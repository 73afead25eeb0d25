package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
)

// TestFollowUpOfAnUnconfirmedSaveIsSentUntilConfirmed: a call's save as
// running that no replica acknowledged in time (graph.ErrUnconfirmed) is
// followed by a save of the call as approved and not sent. The replica
// may still get the first late — after the bot stopped waiting for it —
// and then take over: it must have the follow-up too, or it shows a
// call never sent as running (an "outcome unknown" card). So the
// follow-up (graph.WithFollowUp) is sent again until the replica has it,
// rather than given up at the first wait that falls short; a save that
// is not a follow-up still returns ErrUnconfirmed at once.
func TestFollowUpOfAnUnconfirmedSaveIsSentUntilConfirmed(t *testing.T) {
	ctx := context.Background()
	w := newWithReplica(t, "followup")
	replica, rdb, onReplica, prefix, s, stalled := w.replica, w.rdb, w.onReplica, w.prefix, w.s, w.stalled
	headOn := func(rdb *redis.Client, thread string) string {
		cp, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix}).Head(ctx, thread)
		if err != nil {
			return ""
		}
		return cp.ID
	}

	thread := uniqueName("T1:C1")
	paused := firstCheckpoint(thread, "deploy")
	mustSave(t, s, paused)
	replica.Pause()
	defer replica.Resume()
	running := nextCheckpoint(paused)
	if err := stalled.Save(ctx, running); !errors.Is(err, graph.ErrUnconfirmed) {
		t.Fatalf("Save(the call running) with the replica stopped = %v, want ErrUnconfirmed", err)
	}
	approvedAgain := nextCheckpoint(running)
	done := make(chan error, 1)
	go func() { done <- stalled.Save(graph.WithFollowUp(ctx), approvedAgain) }()
	deadline := time.Now().Add(20 * time.Second)
	for headOn(rdb, thread) != approvedAgain.ID {
		if time.Now().After(deadline) {
			t.Fatalf("the follow-up never reached the master")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The replica goes on, later than the bot waits for it once.
	replica.Resume()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Save(the follow-up) = %v, want it confirmed once the replica went on", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Save(the follow-up) never returned")
	}
	if got := headOn(onReplica, thread); got != approvedAgain.ID {
		t.Errorf("the replica's head once the follow-up returned = %q, want %q", got, approvedAgain.ID)
	}

	// A save that is not a follow-up is not sent again.
	replica.Pause()
	start := time.Now()
	if err := stalled.Save(ctx, nextCheckpoint(approvedAgain)); !errors.Is(err, graph.ErrUnconfirmed) {
		t.Errorf("Save(not a follow-up) with the replica stopped = %v, want ErrUnconfirmed", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Save(not a follow-up) with the replica stopped took %v: it was sent again", took)
	}
}
