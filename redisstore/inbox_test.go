package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/runner/runnertest"
)

func TestRunnerInboxContract(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	runnertest.TestInbox(t, func(t *testing.T) runner.Inbox {
		return redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("inbox")})
	})
}

func TestRunnerInboxContractCluster(t *testing.T) {
	t.Parallel()
	rdb := redistest.Cluster(t)
	runnertest.TestInbox(t, func(t *testing.T) runner.Inbox {
		return redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("inbox")})
	})
}

// Ending a session with an inbox update writes the thread's entries and
// decisions with the rest of the session's end and says what it replaced
// and who opened the Home tab (read in the same step, so that the front
// end need not ask), on a single server (one round trip, also when Redis has forgotten the
// scripts), with replicas to wait for, and on a Redis Cluster (where the
// inbox lives in a slot of its own).
func TestCloseThreadWritesTheInbox(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		rdb      func(t *testing.T) redis.UniversalClient
		replicas int
		flush    bool
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }, 0, false},
		{"single, scripts flushed", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }, 0, true},
		{"single, waiting for a replica", func(t *testing.T) redis.UniversalClient {
			master := redistest.StartServer(t)
			redistest.StartReplica(t, master)
			rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}, 1, false},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) }, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := tt.rdb(t)
			store := redisstore.New(rdb, redisstore.Options{Prefix: "inbox-" + uniqueName("p"), Replicas: tt.replicas})
			thread := uniqueName("T1:C1")
			bob := uniqueName("U0BOB")
			if tt.flush {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			open := runner.Opening{Thread: thread, Owner: "A", TTL: time.Minute}
			got, err := store.OpenThread(ctx, open)
			if err != nil || !got.Held {
				t.Fatalf("OpenThread = %+v, %v", got, err)
			}
			since := time.Now().UTC().Truncate(time.Millisecond)
			waiting := runner.InboxEntry{Thread: thread, Call: "1.0", Tool: "deploy", Requester: "U0ALICE", Channel: "C1",
				Since: since, Approvers: []string{bob}}
			u := &runner.InboxUpdate{Thread: thread, Waiting: []runner.InboxEntry{waiting}}
			if _, err := store.CloseThread(ctx, runner.Closing{Thread: thread, Token: got.Token, Answered: -1, Inbox: u}); err != nil {
				t.Fatalf("CloseThread(with a waiting call) = %v", err)
			}
			if len(u.Replaced) != 0 {
				t.Errorf("Replaced = %+v, want nothing (a new thread)", u.Replaced)
			}
			if u.Watchers == nil || len(u.Watchers) != 0 {
				t.Errorf("Watchers = %#v, want none, said (nobody opened the Home tab)", u.Watchers)
			}
			entries, err := store.InboxEntries(ctx)
			if err != nil || len(entries) != 1 || entries[0].Call != "1.0" || !entries[0].Since.Equal(since) {
				t.Fatalf("InboxEntries = %+v, %v; want the waiting call", entries, err)
			}

			if tt.flush {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if got, err = store.OpenThread(ctx, open); err != nil || !got.Held {
				t.Fatalf("OpenThread after the close = %+v, %v; want the lease free", got, err)
			}
			if err := store.HomeOpened(ctx, bob, since); err != nil {
				t.Fatal(err)
			}
			d := runner.DecisionRecord{Thread: thread, Call: "1.0", Tool: "deploy", By: bob, Kind: agent.Approve, At: since}
			u = &runner.InboxUpdate{Thread: thread, Decided: []runner.DecisionRecord{d}}
			if _, err := store.CloseThread(ctx, runner.Closing{Thread: thread, Token: got.Token, Answered: -1, Inbox: u}); err != nil {
				t.Fatalf("CloseThread(the call decided) = %v", err)
			}
			if len(u.Replaced) != 1 || u.Replaced[0].Call != "1.0" {
				t.Errorf("Replaced = %+v, want the call that waited", u.Replaced)
			}
			if len(u.Watchers) != 1 || u.Watchers[0].User != bob || !u.Watchers[0].At.Equal(since) {
				t.Errorf("Watchers = %+v, want bob, who opened the Home tab at %v", u.Watchers, since)
			}
			if entries, err := store.InboxEntries(ctx); err != nil || len(entries) != 0 {
				t.Errorf("InboxEntries after the decision = %+v, %v; want none", entries, err)
			}
			recent, err := store.RecentDecisions(ctx, bob, 10)
			if err != nil || len(recent) != 1 || recent[0].Kind != agent.Approve || recent[0].Call != "1.0" {
				t.Errorf("RecentDecisions = %+v, %v; want bob's approval", recent, err)
			}
			if got, err := store.OpenThread(ctx, open); err != nil || !got.Held {
				t.Errorf("OpenThread after the second close = %+v, %v; want the lease free", got, err)
			}
		})
	}
}

// Deleting a thread takes its calls out of the inbox.
func TestDeleteForgetsTheInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: uniqueName("inbox")})
	thread := uniqueName("T1:C1")
	mustSave(t, store, firstCheckpoint(thread, "hi"))
	if err := store.UpdateInbox(ctx, &runner.InboxUpdate{Thread: thread, Waiting: []runner.InboxEntry{{Thread: thread, Call: "1.0"}}}); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, thread); err != nil {
		t.Fatal(err)
	}
	if entries, err := store.InboxEntries(ctx); err != nil || len(entries) != 0 {
		t.Errorf("InboxEntries after Delete = %+v, %v; want none", entries, err)
	}
}

// The Home tab's openers are kept for the store's TTL.
func TestHomeOpeners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: uniqueName("home"), TTL: time.Hour})
	now := time.Now()
	if err := store.HomeOpened(ctx, "U0OLD", now.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := store.HomeOpened(ctx, "U0BOB", now); err != nil {
		t.Fatal(err)
	}
	got, err := store.HomeOpeners(ctx, now.Add(-time.Hour))
	if err != nil || len(got) != 1 || got[0] != "U0BOB" {
		t.Errorf("HomeOpeners = %v, %v; want [U0BOB]", got, err)
	}
	if all, _ := store.HomeOpeners(ctx, time.Time{}); len(all) != 1 {
		t.Errorf("HomeOpeners(ever) = %v; want the one who opened it lately (the other was forgotten)", all)
	}
}
