package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/audit"
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
	t.Parallel()
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
	t.Parallel()
	ctx := context.Background()
	cluster := redistest.ClusterWithReplicas(t)
	prefix := uniqueName("acceptfailover")
	// The write with its replica behind is given little time: no
	// acknowledgement comes. The others are given time: a replica that
	// answers may be slow to on a busy machine (the bot's
	// default, within the client's read timeout).
	opts := redisstore.Options{Prefix: prefix, Replicas: 1, ReplicasConnected: true, ReplicaTimeout: 300 * time.Millisecond}
	s := redisstore.New(cluster.Client, opts)
	opts.ReplicaTimeout = 2 * time.Second
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

// TestAuditChainOutlivesAFailover: an audit entry the store said it
// appended — an execution, written before its call is sent — is on a
// replica, so that a failover of the audit chain's master keeps it: the
// chain after the failover still holds the head an operator noted then
// (bot audit head), rather than a fork where later entries take its seq
// with other hashes. An append the replicas did not acknowledge fails,
// and is not in the chain unless a replica has it.
func TestAuditChainOutlivesAFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := redistest.ClusterWithReplicas(t)
	prefix := uniqueName("auditfailover")
	// The append with its replica behind is given little time: no
	// acknowledgement comes. The others are given time: a replica that
	// answers may be slow to on a busy machine (the bot's
	// default, within the client's read timeout).
	opts := redisstore.Options{Prefix: prefix, Replicas: 1, ReplicasConnected: true, ReplicaTimeout: 2 * time.Second}
	if err := redisstore.New(cluster.Client, opts).Audit(ctx, map[string]string{"event": "decision", "decision": "approve", "by": "U1"}); err != nil {
		t.Fatalf("Audit() = %v", err)
	}
	behind := opts
	behind.ReplicaTimeout = 300 * time.Millisecond
	s := redisstore.New(cluster.Client, behind)

	lag := cluster.LagReplica(t, "{"+prefix+":audit}:head")
	err := s.Audit(ctx, map[string]string{"event": "execution", "call": "0.0", "by": "U1"})
	if err != nil && !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Audit() with the replica behind = %v; want ErrNotReplicated or success", err)
	}
	t.Logf("Audit() with the replica behind = %v", err)
	var noted audit.Head
	if err == nil {
		if noted, err = s.AuditHead(ctx); err != nil {
			t.Fatalf("AuditHead() = %v", err)
		}
	}
	lag.TakeOver()

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	after := redisstore.New(rdb, opts)
	if err := after.Audit(ctx, map[string]string{"event": "outcome", "call": "0.0", "outcome": "done"}); err != nil {
		t.Fatalf("Audit() after the failover = %v", err)
	}
	var anchors []audit.Anchor
	if noted.Seq > 0 {
		anchors = append(anchors, audit.Anchor{Seq: noted.Seq, Hash: noted.Hash})
	}
	if rep, err := after.VerifyAudit(ctx, anchors...); err != nil {
		t.Fatalf("VerifyAudit(%v) after the failover = %+v, %v; the chain forked", anchors, rep, err)
	}
	entries, err := after.AuditEntries(ctx, "", time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, e := range entries {
		events = append(events, e.Fields["event"])
	}
	if noted.Seq > 0 && !slices.Contains(events, "execution") {
		t.Errorf("the chain after the failover holds %q; the execution Audit acknowledged is gone", events)
	}
}
