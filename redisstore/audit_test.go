package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/audit"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// servers are the Redis deployments the audit chain must hold on: a
// single server, a Redis Cluster (where the stream is in a slot of its
// own and appends are scripts of their own) and the embedded Redis.
var servers = []struct {
	name string
	rdb  func(t *testing.T) redis.UniversalClient
}{
	{"single", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) }},
	{"embedded", func(t *testing.T) redis.UniversalClient {
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}},
}

// Entries appended on their own, with a claim and at the end of a
// session form one chain that verifies, up to the head.
func TestAuditChain(t *testing.T) {
	t.Parallel()
	for _, tt := range servers {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := redisstore.New(tt.rdb(t), redisstore.Options{Prefix: uniqueName("audit")})
			thread := uniqueName("T1:C1")
			if err := store.Audit(ctx, map[string]string{"event": "refusal", "thread": thread, "by": "U2", "reason": ""}); err != nil {
				t.Fatal(err)
			}
			c, err := store.ClaimDecision(ctx, runner.DecisionClaim{Thread: thread, Key: "decision:0.0#0", Value: []byte(`{}`),
				Audit: map[string]string{"event": "decision", "thread": thread, "decision": "approve", "by": "U1"}})
			if err != nil || !c.Won {
				t.Fatalf("ClaimDecision = %+v, %v", c, err)
			}
			o, err := store.OpenThread(ctx, runner.Opening{Thread: thread, Owner: "A", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.CloseThread(ctx, runner.Closing{Thread: thread, Token: o.Token, Answered: -1, Audit: []map[string]string{
				{"event": "outcome", "thread": thread, "outcome": "done"}, {"event": "outcome", "thread": thread, "outcome": "failed"},
			}}); err != nil {
				t.Fatal(err)
			}
			if err := store.Audit(ctx, map[string]string{"seq": "9"}); !errors.Is(err, audit.ErrReservedField) {
				t.Errorf("Audit with a seq of its own = %v, want ErrReservedField", err)
			}

			rep, err := store.VerifyAudit(ctx)
			head, _ := store.AuditHead(ctx)
			if err != nil || rep.Entries != 4 || rep.First != 1 || rep.Last.Seq != 4 || head.Seq != 4 || rep.Last.Hash != head.Hash {
				t.Fatalf("VerifyAudit = %+v, %v (head %+v); want 4 entries up to the head", rep, err, head)
			}
			entries, err := store.AuditEntries(ctx, "", time.Time{}, 10)
			if err != nil || len(entries) != 4 {
				t.Fatalf("AuditEntries = %v, %v", entries, err)
			}
			for i, want := range []string{"refusal", "decision", "outcome", "outcome"} {
				e := entries[i]
				if e.Fields["event"] != want || e.Fields["seq"] != fmt.Sprint(i+1) || e.Fields["at"] == "" {
					t.Errorf("entry %d = %v; want the %s, seq %d, with its time", i, e.Fields, want, i+1)
				}
				if _, ok := e.Fields["reason"]; ok {
					t.Errorf("entry %d keeps an empty field: %v", i, e.Fields)
				}
			}
			if later, _ := store.AuditEntries(ctx, entries[1].ID, time.Time{}, 10); len(later) != 2 || later[0].ID != entries[2].ID {
				t.Errorf("AuditEntries after %s = %v; want the last two", entries[1].ID, later)
			}
			if none, _ := store.AuditEntries(ctx, "", time.Now().Add(time.Hour), 10); len(none) != 0 {
				t.Errorf("AuditEntries since an hour from now = %v", none)
			}
		})
	}
}

// Replicas append at once — on their own, with claims, at the end of
// sessions — and the chain never forks: every entry is there once, in
// one line from the first to the head; and it verifies meanwhile.
func TestAuditConcurrentAppendsDoNotFork(t *testing.T) {
	t.Parallel()
	for _, tt := range servers[:2] {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueName("audit-race")
			// Two stores on two clients of one Redis: two replicas,
			// each with its own idea of the head.
			rdb := tt.rdb(t)
			stores := []*redisstore.Store{
				redisstore.New(rdb, redisstore.Options{Prefix: prefix}),
				redisstore.New(secondClient(t, rdb), redisstore.Options{Prefix: prefix}),
			}
			const workers, each = 8, 15
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					store := stores[w%2]
					for i := range each {
						rec := map[string]string{"event": "decision", "by": fmt.Sprintf("w%d", w), "n": fmt.Sprint(i)}
						var err error
						switch i % 3 {
						case 0:
							err = store.Audit(ctx, rec)
						case 1:
							_, err = store.ClaimDecision(ctx, runner.DecisionClaim{Thread: fmt.Sprintf("T:%d:%d", w, i), Key: "d", Value: []byte("{}"), Audit: rec})
						case 2:
							_, err = store.CloseThread(ctx, runner.Closing{Thread: fmt.Sprintf("T:%d:%d", w, i), Token: "x", Answered: -1, Audit: []map[string]string{rec}})
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			// Verifying while they append finds no break: entries
			// appended after the head was read are left out.
			done := make(chan struct{})
			verified := make(chan int)
			go func() {
				n := 0
				defer func() { verified <- n }()
				for {
					select {
					case <-done:
						return
					default:
					}
					if rep, err := stores[1].VerifyAudit(ctx); err != nil {
						t.Errorf("VerifyAudit while appending = %+v, %v", rep, err)
						return
					}
					n++
				}
			}()
			wg.Wait()
			close(done)
			if n := <-verified; n == 0 {
				t.Error("no verification ran while appending")
			}
			rep, err := stores[0].VerifyAudit(ctx)
			if err != nil || rep.Entries != workers*each {
				t.Fatalf("VerifyAudit = %+v, %v; want all %d entries in one chain", rep, err, workers*each)
			}
			seen := map[string]bool{}
			entries, _ := stores[1].AuditEntries(ctx, "", time.Time{}, 2*workers*each)
			for _, e := range entries {
				k := e.Fields["by"] + "/" + e.Fields["n"]
				if seen[k] {
					t.Errorf("entry %s appended twice", k)
				}
				seen[k] = true
			}
			if len(seen) != workers*each {
				t.Errorf("%d distinct entries, want %d", len(seen), workers*each)
			}
		})
	}
}

// Entries older than the retention are trimmed as the next one is
// appended; the chain still verifies, anchored at the oldest kept entry,
// and the head says which were trimmed — while entries deleted by hand
// beyond those are still found.
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	for _, tt := range servers {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := tt.rdb(t)
			prefix := uniqueName("audit-retention")
			const retention = 24 * time.Hour
			store := redisstore.New(rdb, redisstore.Options{Prefix: prefix, AuditRetention: retention})
			for i := range 3 {
				if err := store.Audit(ctx, map[string]string{"event": "decision", "n": fmt.Sprint(i)}); err != nil {
					t.Fatal(err)
				}
			}
			old, _ := store.AuditEntries(ctx, "", time.Time{}, 10)
			cut := old[2].Time()
			// Later entries: appended until the server's clock is past
			// the third's millisecond. Those of that millisecond go with
			// the first three.
			var trimmed int64
			for deadline := time.Now().Add(5 * time.Second); ; {
				if err := store.Audit(ctx, map[string]string{"event": "decision"}); err != nil {
					t.Fatal(err)
				}
				all, _ := store.AuditEntries(ctx, "", time.Time{}, 100)
				last := all[len(all)-1]
				if last.Time().After(cut) {
					trimmed, _ = all[len(all)-2].Seq()
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the server's clock does not move")
				}
			}
			// A replica whose clock says the first three are past the
			// retention appends: they go.
			later := redisstore.New(rdb, redisstore.Options{Prefix: prefix, AuditRetention: retention,
				Now: func() time.Time { return cut.Add(time.Millisecond + retention) }})
			if err := later.Audit(ctx, map[string]string{"event": "decision"}); err != nil {
				t.Fatal(err)
			}
			kept, _ := store.AuditEntries(ctx, "", time.Time{}, 100)
			head, _ := store.AuditHead(ctx)
			if first, _ := kept[0].Seq(); first != trimmed+1 || head.Trimmed != trimmed || kept[len(kept)-1].Fields["hash"] != head.Hash {
				t.Fatalf("after retention: first kept %v, head %+v; want entries 1 to %d trimmed, the rest kept", kept[0].Fields, head, trimmed)
			}
			rep, err := store.VerifyAudit(ctx)
			if err != nil || rep.First != trimmed+1 || rep.Trimmed != trimmed || rep.Last != (audit.Head{Hash: head.Hash, Seq: head.Seq}) {
				t.Errorf("VerifyAudit after retention = %+v, %v; want entries from %d, those before trimmed", rep, err, trimmed+1)
			}
			// Deleting the oldest kept entry is not retention's doing.
			if err := rdb.XDel(ctx, prefix+":audit", kept[0].ID).Err(); err != nil {
				t.Fatal(err)
			}
			var b *audit.BreakError
			if _, err := store.VerifyAudit(ctx); !errors.As(err, &b) || b.Kind != audit.Missing || b.Seq != trimmed+2 {
				t.Errorf("VerifyAudit with entry %d deleted = %v; want it missing before the oldest kept", trimmed+1, err)
			}
		})
	}
}

// secondClient is another client of rdb's Redis.
func secondClient(t *testing.T, rdb redis.UniversalClient) redis.UniversalClient {
	var c redis.UniversalClient
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		c = redis.NewClusterClient(r.Options())
	case *redis.Client:
		c = redis.NewClient(r.Options())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A process whose idea of the head is stale (another process appended,
// or the head was reset) follows the stored head without forking.
func TestAuditFollowsTheStoredHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	prefix := uniqueName("audit-head")
	a := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	b := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	for _, s := range []*redisstore.Store{a, b, a, a, b} {
		if err := s.Audit(ctx, map[string]string{"event": "decision"}); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := a.VerifyAudit(ctx); err != nil || rep.Entries != 5 {
		t.Errorf("VerifyAudit = %+v, %v; want 5 entries", rep, err)
	}
	// The head deleted (by hand): the chain starts over, which verify
	// reports, and appends do not loop.
	if err := rdb.Del(ctx, "{"+prefix+":audit}:head").Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Audit(ctx, map[string]string{"event": "decision"}); err != nil {
		t.Fatal(err)
	}
	var brk *audit.BreakError
	if _, err := b.VerifyAudit(ctx); !errors.As(err, &brk) || brk.Kind != audit.Reordered || brk.Seq != 1 {
		t.Errorf("VerifyAudit after the head was deleted = %v; want the chain starting over", err)
	}
}

// A trail longer than one read is verified page by page.
func TestAuditVerifyPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: uniqueName("audit-pages")})
	const batches, each = 25, 100
	for b := range batches {
		recs := make([]map[string]string, each)
		for i := range recs {
			recs[i] = map[string]string{"event": "decision", "n": fmt.Sprint(b*each + i)}
		}
		if err := store.AuditAll(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := store.VerifyAudit(ctx); err != nil || rep.Entries != batches*each || rep.Last.Seq != batches*each {
		t.Errorf("VerifyAudit = %+v, %v; want %d entries", rep, err, batches*each)
	}
}

// A save that carries audit entries (a call's execution, runner.SaveAudit)
// appends them in the same step on a single server, and says so; one
// that a fence stops appends nothing; on a cluster, where the stream is
// in another slot, the save leaves them to the runner. Either way the
// chain verifies.
func TestSaveAppendsItsAuditEntries(t *testing.T) {
	t.Parallel()
	for _, tt := range servers {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := redisstore.New(tt.rdb(t), redisstore.Options{Prefix: uniqueName("saveaudit")})
			thread := uniqueName("T1:C1")
			token, err := store.AcquireLease(ctx, thread, "runner-1", time.Minute)
			if err != nil || token == "" {
				t.Fatalf("AcquireLease = %q, %v", token, err)
			}
			first := firstCheckpoint(thread, "hello")
			sa := &runner.SaveAudit{Records: []map[string]string{
				{"event": "outcome", "thread": thread, "outcome": "done"}, {"event": "execution", "thread": thread, "tool": "deploy"},
			}}
			if err := store.Save(runner.WithSaveAudit(graph.WithFence(ctx, token), sa), first); err != nil {
				t.Fatalf("Save with its entries = %v", err)
			}
			appended := !sa.Pending()
			if wantAppended := tt.name != "cluster"; appended != wantAppended {
				t.Fatalf("the save appended its entries: %v; want %v on %s", appended, wantAppended, tt.name)
			}
			stale := &runner.SaveAudit{Records: []map[string]string{{"event": "execution", "thread": thread, "tool": "delete"}}}
			if err := store.Save(runner.WithSaveAudit(graph.WithFence(ctx, "runner-0:stale"), stale), nextCheckpoint(first, "again")); !errors.Is(err, redisstore.ErrFenced) {
				t.Fatalf("Save fenced by another token = %v, want ErrFenced", err)
			}
			if !stale.Pending() {
				t.Fatal("a fenced save appended its entries")
			}
			rep, err := store.VerifyAudit(ctx)
			entries, _ := store.AuditEntries(ctx, "", time.Time{}, 10)
			want := 0
			if appended {
				want = 2
			}
			if err != nil || rep.Entries != want || len(entries) != want {
				t.Fatalf("VerifyAudit = %+v, %v, entries %v; want %d entries", rep, err, entries, want)
			}
			if appended && (entries[0].Fields["event"] != "outcome" || entries[1].Fields["tool"] != "deploy") {
				t.Errorf("entries = %v; want the outcome, then the execution", entries)
			}
		})
	}
}

// A trail whose older entries an earlier version wrote, one stream field
// each, and whose newer ones this version appends packed, verifies as one
// chain; every reader reads both alike (AuditEntries, AuditLog), and a
// packed entry edited in Redis is found changed.
func TestAuditReadsEntriesOfEarlierVersions(t *testing.T) {
	t.Parallel()
	for _, tt := range []int{0, 2} {
		t.Run(servers[tt].name, func(t *testing.T) {
			ctx := context.Background()
			rdb := servers[tt].rdb(t)
			prefix := uniqueName("audit")
			// Two entries as an earlier version appended them: one
			// stream field each, the head beside.
			var head audit.Head
			for _, by := range []string{"U1", "U2"} {
				fields, next, err := audit.Seal(map[string]string{"event": "decision", "decision": "approve", "by": by, "at": "2026-11-20T08:00:00Z"}, head)
				if err != nil {
					t.Fatal(err)
				}
				values := map[string]any{}
				for k, v := range fields {
					values[k] = v
				}
				if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: prefix + ":audit", Values: values}).Err(); err != nil {
					t.Fatal(err)
				}
				head = next
			}
			if err := rdb.HSet(ctx, "{"+prefix+":audit}:head", "hash", head.Hash, "seq", head.Seq).Err(); err != nil {
				t.Fatal(err)
			}
			store := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			if err := store.AuditAll(ctx, []map[string]string{
				{"event": "execution", "by": "U3", "args": `{"a":"1:b\n"}`}, {"event": "outcome", "outcome": "done"},
			}); err != nil {
				t.Fatal(err)
			}
			rep, err := store.VerifyAudit(ctx)
			if err != nil || rep.Entries != 4 || rep.Before != 0 || rep.Last.Seq != 4 {
				t.Fatalf("VerifyAudit = %+v, %v; want the 4 entries, both forms, in one chain", rep, err)
			}
			raw, err := rdb.XRange(ctx, prefix+":audit", "-", "+").Result()
			if err != nil || len(raw) != 4 {
				t.Fatalf("XRANGE = %v, %v", raw, err)
			}
			if _, ok := raw[2].Values["fields"]; !ok || len(raw[2].Values) != 3 {
				t.Errorf("entry appended now is stored as %v; want seq, hash and the packed fields", raw[2].Values)
			}
			entries, err := store.AuditEntries(ctx, "", time.Time{}, 10)
			if err != nil || len(entries) != 4 {
				t.Fatalf("AuditEntries = %v, %v", entries, err)
			}
			log, err := store.AuditLog(ctx, 10)
			if err != nil || len(log) != 4 {
				t.Fatalf("AuditLog = %v, %v", log, err)
			}
			for i, want := range []struct{ event, by, args string }{{"decision", "U1", ""}, {"decision", "U2", ""}, {"execution", "U3", `{"a":"1:b\n"}`}, {"outcome", "", ""}} {
				for _, f := range []map[string]string{entries[i].Fields, log[3-i]} {
					if f["event"] != want.event || f["by"] != want.by || f["args"] != want.args || f["seq"] != fmt.Sprint(i+1) || f["hash"] == "" || f["at"] == "" {
						t.Errorf("entry %d = %v; want the %s by %q, seq %d", i, f, want.event, want.by, i+1)
					}
					if _, ok := f["fields"]; ok {
						t.Errorf("entry %d = %v: read with its packed fields", i, f)
					}
				}
			}

			// U3 becomes U4 inside the packed fields, the length kept.
			packed, _ := raw[2].Values["fields"].(string)
			if !strings.Contains(packed, "2:U3\n") {
				t.Fatalf("packed fields %q do not hold by's value as the canonical encoding writes it", packed)
			}
			edited := map[string]any{"seq": raw[2].Values["seq"], "hash": raw[2].Values["hash"], "fields": strings.Replace(packed, "2:U3\n", "2:U4\n", 1)}
			rewriteStream(t, rdb, prefix+":audit", raw, 2, edited)
			_, err = store.VerifyAudit(ctx)
			var b *audit.BreakError
			if !errors.As(err, &b) || b.Kind != audit.Changed || b.Seq != 3 {
				t.Fatalf("VerifyAudit after an edit of a packed entry = %v; want entry 3 changed", err)
			}
		})
	}
}

// rewriteStream writes the stream again as msgs, with msgs[i]'s values
// replaced by values, keeping every ID.
func rewriteStream(t *testing.T, rdb redis.UniversalClient, key string, msgs []redis.XMessage, i int, values map[string]any) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	for j, m := range msgs {
		v := m.Values
		if j == i {
			v = values
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: m.ID, Values: v}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
