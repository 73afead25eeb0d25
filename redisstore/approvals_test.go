package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/runner/runnertest"
)

// The embedded Redis of the playground and of bot chat runs the same Lua:
// the approvals' contract holds on it too.
func TestApprovalsContractEmbedded(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	runnertest.TestApprovals(t, func(t *testing.T) runnertest.Store {
		return redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("runner")})
	})
}

// On Redis Cluster the approvals' script must touch the thread's slot
// only (a CROSSSLOT error otherwise), and the wake-up goes apart.
func TestApprovalsContractCluster(t *testing.T) {
	t.Parallel()
	rdb := redistest.Cluster(t)
	runnertest.TestApprovals(t, func(t *testing.T) runnertest.Store {
		return redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("runner")})
	})
}

// ClaimApproval writes nothing when the head moved on, wakes the thread
// up, and takes the lease for the drive that follows a recorded
// approval, reading back the claims asked for — on a single server and
// on a Redis Cluster.
func TestClaimApproval(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]func(t *testing.T) redis.UniversalClient{
		"single":  func(t *testing.T) redis.UniversalClient { return redistest.Client(t) },
		"cluster": func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) },
	} {
		t.Run(name, func(t *testing.T) { testClaimApproval(t, rdb(t)) })
	}
}

func testClaimApproval(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	store := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("approve")})
	thread := uniqueName("thread")
	mustSave(t, store, firstCheckpoint(thread, "hi"))
	a := runner.Approval{Key: "decision:0.0#0", Set: "approvals:decision:0.0#0:h", By: "U0BOB", Entry: []byte(`{"by":"U0BOB"}`),
		Required: 2, Value: []byte(`{"kind":"approve","by":"U0BOB"}`)}

	if _, err := store.ClaimApproval(ctx, runner.ApprovalClaim{Thread: thread, Approval: a, ExpectHead: "cp-other"}); !errors.Is(err, runner.ErrStale) {
		t.Fatalf("ClaimApproval(stale head) error = %v, want ErrStale", err)
	}
	if all, _ := store.Claims(ctx, thread); len(all) != 0 {
		t.Fatalf("a stale approval wrote %q", all)
	}
	wake := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	got, err := store.ClaimApproval(ctx, runner.ApprovalClaim{Thread: thread, Approval: a, ExpectHead: "cp-1", WakeBy: wake,
		LeaseOwner: "runner-1", LeaseTTL: time.Minute, Keys: []string{a.Set, "decision:0.0#0"}})
	if err != nil || !got.Recorded || got.Won || !got.Leased || !strings.HasPrefix(got.Token, "runner-1:") || got.Head != "cp-1" || !strings.HasPrefix(string(got.Claims[a.Set]), "U0BOB\t") {
		t.Fatalf("ClaimApproval() = %+v, %v; want recorded, leased, the head and the approvals read", got, err)
	}
	if due, _ := store.Due(ctx, wake, 1000); !contains(due, thread) {
		t.Errorf("Due(%v) = %v; want the thread woken", wake, due)
	}
	if tok, _ := store.AcquireLease(ctx, thread, "runner-2", time.Minute); tok != "" {
		t.Error("the approval's lease was not taken")
	}
	a.By, a.Entry = "U0CAROL", []byte(`{"by":"U0CAROL"}`)
	got, err = store.ClaimApproval(ctx, runner.ApprovalClaim{Thread: thread, Approval: a, LeaseOwner: "runner-2", LeaseTTL: time.Minute})
	if err != nil || !got.Won || got.Leased || got.Token != "" {
		t.Errorf("ClaimApproval(second) = %+v, %v; want the decision claimed, the held lease not taken", got, err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
