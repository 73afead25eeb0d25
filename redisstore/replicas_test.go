package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// With ReplicasConnected, the replicas a write waits for are at most
// those its master has connected: a master left without its replica (a
// failover promoted it, or it died) goes on taking claims, where a
// strict wait refuses every one. A replica that is connected but does not
// answer is still waited for.
func TestReplicasConnected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { rdb.Close() })
	opts := redisstore.Options{Prefix: uniqueName("connected"), Replicas: 1, ReplicaTimeout: 300 * time.Millisecond}
	strict := redisstore.New(rdb, opts)
	opts.ReplicasConnected = true
	following := redisstore.New(rdb, opts)

	// Connected but stalled: both wait, and fail.
	replica.Pause()
	for name, s := range map[string]*redisstore.Store{"strict": strict, "following": following} {
		if _, _, err := s.Claim(ctx, "th", "decision:stalled-"+name, []byte("approve")); !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Errorf("%s: Claim() with the replica stalled = %v, want ErrNotReplicated", name, err)
		}
	}
	replica.Resume()

	// Gone: only the strict store refuses.
	replica.Kill()
	deadline := time.Now().Add(20 * time.Second) // generous: a busy machine
	for {
		info, err := rdb.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "connected_slaves:0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the master still reports its replica connected: %q, %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, err := strict.Claim(ctx, "th", "decision:gone-strict", []byte("approve")); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("strict: Claim() without a replica = %v, want ErrNotReplicated", err)
	}
	if _, won, err := following.Claim(ctx, "th", "decision:gone-following", []byte("approve")); err != nil || !won {
		t.Errorf("following: Claim() without a replica = %v, %v; want won", won, err)
	}
}

// A claim its replicas did not acknowledge is on the master only: this
// process reads it back (to tell a person whether their decision is
// recorded) as the replicas have it — an error while they do not
// acknowledge it, the claim once they do — never from the master alone,
// which a failover may lose.
func TestClaimReadBackWaitsForReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("readback"), Replicas: 1, ReplicasConnected: true,
		ReplicaTimeout: 300 * time.Millisecond})
	const thread, key = "T1:C1:1700000000.000100", "decision:c1"

	replica.Pause()
	if _, _, err := s.Claim(ctx, thread, key, []byte("approve")); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Claim() with the replica stalled = %v, want ErrNotReplicated", err)
	}
	if got, err := s.ClaimValues(ctx, thread, []string{key}); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("ClaimValues() of a claim no replica has = %q, %v; want ErrNotReplicated", got, err)
	}
	replica.Resume()
	deadline := time.Now().Add(20 * time.Second) // generous: a busy machine
	for {
		got, err := s.ClaimValues(ctx, thread, []string{key})
		if err == nil && string(got[key]) == "approve" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClaimValues() once the replica is back = %q, %v; want the claim", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Acknowledged: reads are plain reads again.
	if got, err := s.ClaimValues(ctx, thread, []string{key}); err != nil || string(got[key]) != "approve" {
		t.Errorf("ClaimValues() after = %q, %v; want the claim", got, err)
	}
}
