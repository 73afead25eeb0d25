package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/redisstore"
)

// TestMembersChangedMarkWaitsForReplicas: with Replicas set, a
// membership change's mark returns only once a replica has it, and fails
// with ErrNotReplicated while none acknowledges it — so the event is not
// acknowledged to Slack, which sends it again, while a failover could
// lose the only mark that makes a removed approver's click ask Slack
// again. Sent again once the replica is back, the same event is
// acknowledged: the mark is on the replica.
func TestMembersChangedMarkWaitsForReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWithReplica(t, "memberswait")
	replica, onReplica, prefix, s, stalled := w.replica, w.onReplica, w.prefix, w.s, w.stalled
	markOnReplica := func(field string) string {
		return onReplica.HGet(ctx, prefix+":{members}:changed", field).Val()
	}

	if first, err := s.MarkMembersChanged(ctx, "Ev1", []string{"group:S1"}, time.Minute, time.Hour); !first || err != nil {
		t.Fatalf("MarkMembersChanged(Ev1) = %v, %v; want a first mark", first, err)
	}
	if markOnReplica("group:S1") == "" {
		t.Errorf("the replica has no mark for group:S1 once MarkMembersChanged returned")
	}

	replica.Pause()
	_, err := stalled.MarkMembersChanged(ctx, "Ev2", []string{"group:S2"}, time.Minute, time.Hour)
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("MarkMembersChanged(Ev2) with the replica stopped = %v, want ErrNotReplicated", err)
	}
	// Slack sends the unacknowledged event again; the first attempt's
	// mark is on the master, and the resend waits for it all the same.
	_, err = stalled.MarkMembersChanged(ctx, "Ev2", []string{"group:S2"}, time.Minute, time.Hour)
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("MarkMembersChanged(Ev2) sent again with the replica still stopped = %v, want ErrNotReplicated", err)
	}
	replica.Resume()
	if _, err := stalled.MarkMembersChanged(ctx, "Ev2", []string{"group:S2"}, time.Minute, time.Hour); err != nil {
		t.Fatalf("MarkMembersChanged(Ev2) sent again with the replica back = %v", err)
	}
	if markOnReplica("group:S2") == "" {
		t.Errorf("the replica has no mark for group:S2 once the resent event was acknowledged")
	}
}
