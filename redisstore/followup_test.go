package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
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
	t.Parallel()
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
	before := scriptsRun(t, rdb)
	if err := stalled.Save(ctx, nextCheckpoint(approvedAgain)); !errors.Is(err, graph.ErrUnconfirmed) {
		t.Errorf("Save(not a follow-up) with the replica stopped = %v, want ErrUnconfirmed", err)
	}
	if sent := scriptsRun(t, rdb) - before; sent != 1 {
		t.Errorf("Save(not a follow-up) with the replica stopped ran %d scripts on the master, want 1: it was sent again", sent)
	}
}

// scriptsRun is how many scripts (EVALSHA and EVAL) the server rdb talks
// to has run: on a server of the test's own, the saves it was sent.
func scriptsRun(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		c, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		n += c
	}
	return n
}
