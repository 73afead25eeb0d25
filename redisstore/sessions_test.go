package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

var _ graph.TailLoader = (*redisstore.Store)(nil)

// TestSessions walks one holding of a thread through the session calls,
// on a single server and on a Redis Cluster (where the wake-ups, the
// waiting count and the audit stream live outside the thread's slot): what
// a replica relies on must hold on both — one holder at a time, a
// decision claimed once with its wake-up and audit record, deliveries
// recorded, the schedule set, the lease free afterwards.
func TestSessions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := redisstore.New(tt.rdb(t), redisstore.Options{Prefix: "sessions-" + uniqueName("p")})
			thread := uniqueName("T1:C1")
			now := time.Now()
			open := runner.Opening{Thread: thread, Owner: "A", TTL: time.Minute,
				WakeIfHeld: now.Add(time.Hour), WakeIfBusy: now.Add(2 * time.Hour), Keys: []string{"announced:x", "answered"}}
			got, err := store.OpenThread(ctx, open)
			if err != nil || !got.Held || !strings.HasPrefix(got.Token, "A:") || len(got.Claims) != 0 {
				t.Fatalf("OpenThread(A) = %+v, %v; want held with a token of A's, no claims", got, err)
			}
			tokenA := got.Token
			open.Owner = "B"
			if got, err := store.OpenThread(ctx, open); err != nil || got.Held {
				t.Fatalf("OpenThread(B) while A holds it = %+v, %v; want not held", got, err)
			}
			due, err := store.Due(ctx, now.Add(90*time.Minute), 10)
			if err != nil || len(due) != 1 || due[0] != thread {
				t.Errorf("Due after OpenThread = %v, %v; want [%s]", due, err, thread)
			}

			claim := runner.DecisionClaim{Thread: thread, Key: "decision:x#0", Value: []byte(`{"kind":"approve"}`),
				WakeBy: now.Add(time.Minute), Audit: map[string]string{"thread": thread, "decision": "approve"},
				LeaseOwner: "B", LeaseTTL: time.Minute, Keys: []string{"decision:x#0"}}
			c, err := store.ClaimDecision(ctx, claim)
			if err != nil || !c.Won || c.Leased || c.Token != "" {
				t.Fatalf("ClaimDecision = %+v, %v; want won, lease not taken (A holds it)", c, err)
			}
			claim.Value = []byte(`{"kind":"reject"}`)
			if c, err := store.ClaimDecision(ctx, claim); err != nil || c.Won || string(c.Winner) != `{"kind":"approve"}` {
				t.Errorf("second ClaimDecision = %+v, %v; want lost to the approval", c, err)
			}
			if due, _ := store.Due(ctx, now.Add(2*time.Minute), 10); len(due) != 1 {
				t.Errorf("Due after the claim = %v; want the thread woken by it", due)
			}
			if log, err := store.AuditLog(ctx, 10); err != nil || len(log) != 1 || log[0]["decision"] != "approve" {
				t.Errorf("AuditLog = %v, %v; want the one approval", log, err)
			}

			claims, err := store.CloseThread(ctx, runner.Closing{Thread: thread, Token: tokenA, Record: []string{"announced:x"},
				Answered: 3, Schedule: true, Wake: now.Add(24 * time.Hour), Waiting: 1, Keys: []string{"decision:x#0"}})
			if err != nil || string(claims["decision:x#0"]) != `{"kind":"approve"}` {
				t.Fatalf("CloseThread = %v, %v; want the approval read back", claims, err)
			}
			if due, _ := store.Due(ctx, now.Add(2*time.Hour), 10); len(due) != 0 {
				t.Errorf("Due after CloseThread = %v; want the wake-up moved to its expiry", due)
			}
			vals, err := store.ClaimValues(ctx, thread, []string{"announced:x", "answered", "missing"})
			if err != nil || string(vals["announced:x"]) != "1" || string(vals["answered"]) != "3" || len(vals) != 2 {
				t.Errorf("ClaimValues = %v, %v; want the delivery and the answered count", vals, err)
			}
			if got, err := store.OpenThread(ctx, open); err != nil || !got.Held {
				t.Errorf("OpenThread(B) after A let go = %+v, %v; want held", got, err)
			}
		})
	}
}
