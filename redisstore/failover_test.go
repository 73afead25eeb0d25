package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// TestClaimFollowsAFailover: with replicas to acknowledge each claim, a
// claim is sent with its WAIT to the slot's master as the client last
// knew it. After the thread's master fails over, that node answers MOVED;
// the claim must follow the slot to its new master and be acknowledged
// there, not fail — a failed claim is a click answered "try again" until
// the client happens to refresh its map.
func TestClaimFollowsAFailover(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.ClusterWithReplicas(t)
	prefix := uniqueName("failover")
	s := redisstore.New(cluster.Client, redisstore.Options{Prefix: prefix, Replicas: 1})
	const thread = "T1:C1:1700000000.000100"
	if _, won, err := s.Claim(ctx, thread, "decision:c1", []byte("approve")); err != nil || !won {
		t.Fatalf("Claim before the failover = %v, %v; want won", won, err)
	}
	cluster.Failover(t, prefix+":{"+thread+"}:claims")
	if _, won, err := s.Claim(ctx, thread, "decision:c2", []byte("approve")); err != nil || !won {
		t.Fatalf("Claim after the failover = %v, %v; want won on the slot's new master", won, err)
	}
	// What was claimed before the failover was replicated: it holds.
	if winner, won, err := s.Claim(ctx, thread, "decision:c1", []byte("reject")); err != nil || won || string(winner) != "approve" {
		t.Fatalf("Claim of a key claimed before the failover = %q, %v, %v; want the first claim to hold", winner, won, err)
	}
}

// TestAcceptOutlivesAFailover: a request is stored before Slack is told
// it was received, so that it outlives the process that took it. The
// intake's master fails over after acknowledging it, to a replica that
// never got it (cut off, or behind): Accept must not have said it was
// stored. Either the request is on the slot's new master, or Accept
// failed — the person was told to try again — and nothing of it is left
// to hold the retry off.
func TestAcceptOutlivesAFailover(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.ClusterWithReplicas(t)
	prefix := uniqueName("acceptfailover")
	opts := redisstore.Options{Prefix: prefix, Replicas: 1, ReplicasConnected: true, ReplicaTimeout: 300 * time.Millisecond}
	s := redisstore.New(cluster.Client, opts)
	const id = "command:t1"
	now := time.Now()

	lag := cluster.LagReplica(t, prefix+":{intake}:due")
	first, err := s.Accept(ctx, id, "a", []byte(`{"text":"deploy"}`), now.Add(15*time.Second), time.Hour)
	if err == nil && !first {
		t.Fatalf("Accept() = false; want a new request")
	}
	if err != nil && !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Accept() with the replica behind = %v; want ErrNotReplicated or success", err)
	}
	lag.TakeOver()

	// The bot's client follows the failover; so does a new one.
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	after := redisstore.New(rdb, opts)
	if err == nil {
		if held, err := after.UpdateIntake(ctx, id, "a", []byte(`{"text":"deploy","root":"1.2"}`), now.Add(15*time.Second)); err != nil || !held {
			t.Fatalf("UpdateIntake() after the failover = %v, %v: the request Accept stored is gone", held, err)
		}
		return
	}
	// Told to try again, Slack (or the person) sends it again: it is
	// taken as new.
	if first, err := after.Accept(ctx, id, "b", []byte(`{"text":"deploy"}`), now.Add(15*time.Second), time.Hour); err != nil || !first {
		t.Fatalf("Accept() again after the failover = %v, %v; want a new request", first, err)
	}
}
