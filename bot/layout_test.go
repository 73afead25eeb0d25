package bot_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
)

// TestThreadPausedByAnEarlierVersionResumes: a thread paused by a bot
// that kept its head in a key of its own (cs:{thread}:head) and its inbox
// entry as objects with named fields is still listed as waiting, and
// resumes when approved: the call runs exactly once and the answer is
// posted; the head key is gone after its next save.
func TestThreadPausedByAnEarlierVersionResumes(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	ctx := context.Background()
	url, prefix := testRedisURL(t), "bot-test-"+randomHex()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	var calls atomic.Int64
	rep := &cards{}
	b := newBotAt(t, url, prefix, rep, &calls)
	const thread = "T1:C1:1700000000.000100"
	if err := b.Runner.Start(ctx, runner.StartRequest{Thread: thread, Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	waiting, _ := rep.seen()
	if len(waiting) != 1 {
		t.Fatalf("after the request: %d cards; want 1", len(waiting))
	}

	// The earlier layout: the head in a key of its own, the inbox entry
	// as objects.
	claims, head := prefix+":{"+thread+"}:claims", prefix+":{"+thread+"}:head"
	h, err := rdb.HMGet(ctx, claims, "@seq", "@len", "@id").Result()
	if err != nil || h[0] == nil {
		t.Fatalf("the head in the claims hash = %v, %v; want it there", h, err)
	}
	ttl := rdb.PTTL(ctx, claims).Val()
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, claims, "@seq", "@len", "@id")
		p.HSet(ctx, head, "seq", h[0], "journal_len", h[1], "id", h[2])
		p.PExpire(ctx, head, ttl)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	entries, err := b.Store.InboxEntries(ctx)
	if err != nil || len(entries) != 1 {
		t.Fatalf("InboxEntries() = %+v, %v; want the waiting call", entries, err)
	}
	earlier, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, prefix+":{inbox}:calls", thread, earlier).Err(); err != nil {
		t.Fatal(err)
	}

	if got, err := b.Store.InboxEntries(ctx); err != nil || len(got) != 1 || got[0].Call != waiting[0].Key || got[0].Thread != thread {
		t.Fatalf("InboxEntries() of the earlier form = %+v, %v; want the waiting call %s", got, err, waiting[0].Key)
	}
	c := waiting[0]
	if err := b.Runner.Decide(ctx, runner.Decision{Thread: thread, Call: c.Key, Round: c.Attempts, Hash: c.RunHash(), By: "U_BOB", Kind: agent.Approve}); err != nil {
		t.Fatal(err)
	}
	if err := b.Runner.Drive(ctx, thread); err != nil {
		t.Fatal(err)
	}
	if _, answers := rep.seen(); calls.Load() != 1 || len(answers) != 1 {
		t.Fatalf("after the approval: deploy ran %d times, %d answers; want once and one answer", calls.Load(), len(answers))
	}
	if n := rdb.Exists(ctx, head).Val(); n != 0 {
		t.Errorf("the earlier head key is still there after a save")
	}
	if got, err := b.Store.InboxEntries(ctx); err != nil || len(got) != 0 {
		t.Errorf("InboxEntries() after the answer = %+v, %v; want none waiting", got, err)
	}
}
