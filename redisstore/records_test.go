package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

func TestDedupSeesEachKeyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: uniqueName("records")})
	const n = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts := 0
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, err := s.Dedup(ctx, "event:Ev123", time.Minute)
			if err != nil {
				t.Error(err)
			}
			if first {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firsts != 1 {
		t.Errorf("%d of %d concurrent Dedup calls saw the key first, want 1", firsts, n)
	}
	if first, _ := s.Dedup(ctx, "event:Ev124", time.Minute); !first {
		t.Error("Dedup(another key) = false, want true")
	}
}

func TestRefs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: uniqueName("records")})
	if _, ok, err := s.Ref(ctx, "nope"); ok || err != nil {
		t.Errorf("Ref(unknown) = %v, %v; want false, nil", ok, err)
	}
	if err := s.PutRef(ctx, "abc", []byte(`{"thread":"T:C:1"}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	v, ok, err := s.Ref(ctx, "abc")
	if !ok || err != nil || string(v) != `{"thread":"T:C:1"}` {
		t.Errorf("Ref(abc) = %s, %v, %v", v, ok, err)
	}
}

func TestWakeUps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: uniqueName("records")})
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for thread, at := range map[string]time.Time{"late": now.Add(time.Hour), "early": now.Add(-time.Hour), "now": now} {
		if err := s.Wake(ctx, thread, at); err != nil {
			t.Fatal(err)
		}
	}
	due, err := s.Due(ctx, now, 10)
	if err != nil || !slices.Equal(due, []string{"early", "now"}) {
		t.Errorf("Due(now) = %v, %v; want [early now]", due, err)
	}
	// WakeBy moves a wake-up earlier, never later, and adds a missing one.
	_ = s.WakeBy(ctx, "late", now.Add(3*time.Hour))
	_ = s.WakeBy(ctx, "new", now.Add(3*time.Hour))
	if due, _ := s.Due(ctx, now.Add(61*time.Minute), 10); !slices.Equal(due, []string{"early", "now", "late"}) {
		t.Errorf("Due(+61m) after WakeBy(later) = %v, want [early now late]", due)
	}
	_ = s.WakeBy(ctx, "late", now.Add(-2*time.Hour))
	if due, _ := s.Due(ctx, now.Add(-90*time.Minute), 10); !slices.Equal(due, []string{"late"}) {
		t.Errorf("Due(-90m) after WakeBy(earlier) = %v, want [late]", due)
	}
	_ = s.Wake(ctx, "late", now.Add(time.Hour))
	// A later Wake moves the thread; Forget removes it.
	_ = s.Wake(ctx, "early", now.Add(2*time.Hour))
	_ = s.Forget(ctx, "now")
	if due, _ := s.Due(ctx, now.Add(90*time.Minute), 10); !slices.Equal(due, []string{"late"}) {
		t.Errorf("Due(+90m) = %v, want [late]", due)
	}
}

func TestAudit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: uniqueName("records")})
	for _, d := range []string{"approve", "reject"} {
		if err := s.Audit(ctx, map[string]string{"decision": d, "by": "U1", "call": "0.1"}); err != nil {
			t.Fatal(err)
		}
	}
	log, err := s.AuditLog(ctx, 10)
	if err != nil || len(log) != 2 || log[0]["decision"] != "reject" || log[1]["by"] != "U1" {
		t.Errorf("AuditLog() = %v, %v; want the two records, newest first", log, err)
	}
}

// TestReplicasAcknowledgeWhatGatesASideEffect: with Replicas set, a save
// and a claim return only once a replica has them — and fail, rather than
// let a side effect go ahead, when no replica answers.
func TestReplicasAcknowledgeWhatGatesASideEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	// A replica that answers may still be slow to on a busy machine: the
	// claim it acknowledges is given the bot's default time (within the
	// client's read timeout). The one it cannot acknowledge, stopped
	// below, is given little: it never comes.
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	prefix := uniqueName("wait")
	s := redisstore.New(rdb, redisstore.Options{Prefix: prefix, Replicas: 1, ReplicaTimeout: 2 * time.Second})
	stalled := redisstore.New(rdb, redisstore.Options{Prefix: prefix, Replicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	if _, won, err := s.Claim(ctx, "th", "decision:0.0#0", []byte("approve")); err != nil || !won {
		t.Fatalf("Claim() = %v, %v; want won", won, err)
	}
	replicaClient := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	keys, err := replicaClient.Keys(ctx, "*claims").Result()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, k := range keys {
		if ok, _ := replicaClient.HExists(ctx, k, "decision:0.0#0").Result(); ok {
			found++
		}
	}
	if found != 1 {
		t.Errorf("the claim is in %d of the replica's claim hashes the moment Claim returned (keys %v), want 1", found, keys)
	}
	replica.Pause()
	defer replica.Resume()
	_, _, err = stalled.Claim(ctx, "th", "decision:0.1#0", []byte("approve"))
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("Claim() with the replica stalled = %v, want ErrNotReplicated", err)
	}
}

// The card's records, each written in the step that needs it: records
// set together, once each; a click's dedup with its reference, or with
// the claim its button names (none in another thread; never the head's
// fields); a swapped record says what it replaced. On a single server
// and on a Redis Cluster, where a reference and a dedup key are in slots
// of their own.
func TestCardRecords(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := redisstore.New(tt.rdb(t), redisstore.Options{Prefix: uniqueName("records")})
			thread := uniqueName("T1:C1")
			if err := s.PutRef(ctx, "r1", []byte(`{"thread":"a"}`), time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Claim(ctx, thread, "cardref:1.0#0", []byte("TOKEN|hash")); err != nil {
				t.Fatal(err)
			}

			if _, _, err := s.Claim(ctx, thread, "card:1.0#0", []byte("111.1")); err != nil {
				t.Fatal(err)
			}
			all, err := s.ClaimAll(ctx, thread, map[string][]byte{"card:1.0#0": []byte("222.2"), "copies:1.0#0": {}})
			if err != nil || string(all["card:1.0#0"]) != "111.1" || string(all["copies:1.0#0"]) != "" || len(all) != 2 {
				t.Errorf("ClaimAll = %q, %v; want the card claimed before and the new empty index", all, err)
			}
			if c, _ := s.ClaimValues(ctx, thread, []string{"card:1.0#0", "copies:1.0#0"}); string(c["card:1.0#0"]) != "111.1" || len(c) != 2 {
				t.Errorf("claims after ClaimAll = %q; want both, the card unchanged", c)
			}

			first, v, ok, err := s.DedupRef(ctx, "action:U1:1.1:approve", time.Minute, "r1")
			if !first || !ok || err != nil || string(v) != `{"thread":"a"}` {
				t.Errorf("DedupRef(first click) = %v, %s, %v, %v; want first, with r1's value", first, v, ok, err)
			}
			if first, _, _, err := s.DedupRef(ctx, "action:U1:1.1:approve", time.Minute, "r1"); first || err != nil {
				t.Errorf("DedupRef(the same click again) = %v, %v; want a repeat", first, err)
			}
			if first, _, ok, err := s.DedupRef(ctx, "action:U1:1.2:approve", time.Minute, "nope"); !first || ok || err != nil {
				t.Errorf("DedupRef(unknown reference) = %v, %v, %v; want first, not found", first, ok, err)
			}
			first, v, ok, err = s.DedupClaim(ctx, "action:U1:1.4:approve", time.Minute, thread, "cardref:1.0#0")
			if !first || !ok || err != nil || string(v) != "TOKEN|hash" {
				t.Errorf("DedupClaim(first click) = %v, %s, %v, %v; want first, with the claim", first, v, ok, err)
			}
			if first, _, _, err := s.DedupClaim(ctx, "action:U1:1.4:approve", time.Minute, thread, "cardref:1.0#0"); first || err != nil {
				t.Errorf("DedupClaim(the same click again) = %v, %v; want a repeat", first, err)
			}
			if first, _, ok, err := s.DedupClaim(ctx, "action:U1:1.5:approve", time.Minute, uniqueName("T1:C2"), "cardref:1.0#0"); !first || ok || err != nil {
				t.Errorf("DedupClaim(another thread) = %v, %v, %v; want first, not found", first, ok, err)
			}
			if _, _, _, err := s.DedupClaim(ctx, "action:U1:1.6:approve", time.Minute, thread, "@id"); !errors.Is(err, redisstore.ErrReservedKey) {
				t.Errorf("DedupClaim(the head's field) = %v, want ErrReservedKey", err)
			}

			// A card's reference as the reporter stores it is kept
			// compressed; every way of reading it gives it back as it was.
			card := `{"thread":"T1:C1:1700000000.000200","call":"0.1","hash":"` + strings.Repeat("ab", 32) + `"}`
			if err := s.PutRef(ctx, "r3", []byte(card), time.Minute); err != nil {
				t.Fatal(err)
			}
			if first, v, ok, err := s.DedupRef(ctx, "action:U1:1.3:approve", time.Minute, "r3"); !first || !ok || err != nil || string(v) != card {
				t.Errorf("DedupRef(a stored card reference) = %v, %q, %v, %v; want first, with the value as it was stored", first, v, ok, err)
			}
			if v, ok, err := s.Ref(ctx, "r3"); !ok || err != nil || string(v) != card {
				t.Errorf("Ref(r3) = %q, %v, %v; want the card's value", v, ok, err)
			}
			if _, _, err := s.SwapRef(ctx, "stream#2", []byte(card), time.Minute); err != nil {
				t.Fatal(err)
			}
			if old, had, err := s.SwapRef(ctx, "stream#2", []byte("two"), time.Minute); !had || err != nil || string(old) != card {
				t.Errorf("SwapRef(over a card-sized value) = %q, %v, %v; want it back as it was", old, had, err)
			}

			if _, had, err := s.SwapRef(ctx, "stream#1", []byte("one"), time.Minute); had || err != nil {
				t.Errorf("SwapRef(new) = %v, %v; want nothing replaced", had, err)
			}
			if old, had, err := s.SwapRef(ctx, "stream#1", []byte("two"), time.Minute); !had || err != nil || string(old) != "one" {
				t.Errorf("SwapRef(again) = %s, %v, %v; want one replaced", old, had, err)
			}
			if v, _, _ := s.Ref(ctx, "stream#1"); string(v) != "two" {
				t.Errorf("Ref after SwapRef = %s, want two", v)
			}
		})
	}
}
