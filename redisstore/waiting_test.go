package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// The store keeps no waiting count beside the inbox: a close of a thread
// with calls waiting writes none, and what an earlier version kept (in
// cs:waiting) is retired with an expiry when the bot starts; WaitingTotal counts the calls the
// inbox holds, in entries of either form. On a single server, where the close is one script, and on
// a cluster, where the count was in a slot of its own.
func TestWaitingCallsAreCountedFromTheInbox(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			rdb := tt.rdb(t)
			prefix := uniqueName("waiting")
			s := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			earlier, thread := uniqueName("T1:C1"), uniqueName("T1:C2")
			waiting := prefix + ":waiting"
			// An earlier version's counts: 2 calls of one thread, 1 of
			// another, which settles here.
			if err := rdb.HSet(ctx, waiting, earlier, 2, thread, 1).Err(); err != nil {
				t.Fatal(err)
			}

			for _, th := range []string{thread, uniqueName("T1:C3")} {
				opened, err := s.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-a", TTL: time.Minute})
				if err != nil || !opened.Held {
					t.Fatalf("OpenThread(%s) = %+v, %v; want the lease", th, opened, err)
				}
				u := &runner.InboxUpdate{Thread: th, Waiting: []runner.InboxEntry{
					{Thread: th, Call: "1.0", Tool: "deploy", Requester: "U1", Since: time.Now()},
					{Thread: th, Call: "1.1", Tool: "deploy", Requester: "U1", Since: time.Now()},
				}}
				if _, err := s.CloseThread(ctx, runner.Closing{Thread: th, Token: opened.Token, Answered: -1,
					Schedule: true, Wake: time.Now().Add(time.Hour), Waiting: 2, Inbox: u}); err != nil {
					t.Fatalf("CloseThread(%s) = %v", th, err)
				}
			}
			// An entry in the inbox's earlier form, of objects, counts too.
			if err := rdb.HSet(ctx, prefix+":{inbox}:calls", earlier,
				`[{"thread":"`+earlier+`","call":"1.0"},{"thread":"`+earlier+`","call":"1.1"}]`).Err(); err != nil {
				t.Fatal(err)
			}
			counts, err := rdb.HGetAll(ctx, waiting).Result()
			if err != nil || len(counts) != 2 || counts[earlier] != "2" || counts[thread] != "1" {
				t.Errorf("waiting counts after the closes = %v, %v; want the earlier version's, untouched", counts, err)
			}
			if ttl, err := rdb.PTTL(ctx, waiting).Result(); err != nil || ttl != -1 {
				t.Fatalf("PTTL of the earlier counts = %v, %v; want none yet", ttl, err)
			}
			if err := s.RetireWaitingCounts(ctx); err != nil {
				t.Fatal(err)
			}
			if ttl, err := rdb.PTTL(ctx, waiting).Result(); err != nil || ttl <= 0 {
				t.Errorf("PTTL of the earlier counts once retired = %v, %v; want an expiry", ttl, err)
			}
			if n, err := rdb.Exists(ctx, "{"+prefix+":waiting}:by:"+thread).Result(); err != nil || n != 0 {
				t.Errorf("a close wrote the thread's waiting-by key (%d, %v)", n, err)
			}
			if n, err := s.WaitingTotal(ctx); err != nil || n != 6 {
				t.Errorf("WaitingTotal = %d, %v; want the inbox's 6 calls", n, err)
			}
			for _, th := range []string{earlier, thread} {
				if err := s.SetWaiting(ctx, th, 0); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := rdb.Exists(ctx, waiting).Result(); err != nil || n != 0 {
				t.Errorf("the earlier counts after SetWaiting: %d keys, %v; want none", n, err)
			}
		})
	}
}
