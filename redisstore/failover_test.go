package redisstore_test

import (
	"context"
	"testing"

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
