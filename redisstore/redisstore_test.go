package redisstore_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/graph/graphtest"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner/runnertest"
)

var _ graph.Store = (*redisstore.Store)(nil)

func TestStore(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	graphtest.TestStore(t, func(t *testing.T) graph.Store {
		return redisstore.New(rdb, redisstore.Options{HistoryLimit: graphtest.HistoryLimit})
	})
}

// TestStoreCluster runs the contract on a real Redis Cluster: a script that
// touched keys of two slots would fail there with CROSSSLOT.
func TestStoreCluster(t *testing.T) {
	t.Parallel()
	rdb := redistest.Cluster(t)
	graphtest.TestStore(t, func(t *testing.T) graph.Store {
		return redisstore.New(rdb, redisstore.Options{HistoryLimit: graphtest.HistoryLimit})
	})

	// The calls beyond graph.Store, each touching several keys of a thread.
	t.Run("ClaimsLeasesDelete", func(t *testing.T) {
		ctx := t.Context()
		store := redisstore.New(rdb, redisstore.Options{})
		for i := range 10 { // threads spread over the three masters
			thread := uniqueName(fmt.Sprintf("%s-%d", t.Name(), i))
			mustSave(t, store, firstCheckpoint(thread, "hello"))
			if _, won, err := store.Claim(ctx, thread, "call_1", []byte("approve")); err != nil || !won {
				t.Fatalf("Claim(%q) = won %v, %v; want won", thread, won, err)
			}
			if claims, err := store.Claims(ctx, thread); err != nil || len(claims) != 1 {
				t.Fatalf("Claims(%q) = %q, %v; want one claim", thread, claims, err)
			}
			token, err := store.AcquireLease(ctx, thread, "runner-1", time.Minute)
			if err != nil || token == "" {
				t.Fatalf("AcquireLease(%q) = %q, %v; want a token", thread, token, err)
			}
			if ok, err := store.RenewLease(ctx, thread, token, time.Minute); err != nil || !ok {
				t.Fatalf("RenewLease(%q) = %v, %v; want true", thread, ok, err)
			}
			if err := store.ReleaseLease(ctx, thread, token); err != nil {
				t.Fatalf("ReleaseLease(%q) error = %v", thread, err)
			}
			if err := store.Delete(ctx, thread); err != nil {
				t.Fatalf("Delete(%q) error = %v", thread, err)
			}
			if _, err := store.Load(ctx, thread); !errors.Is(err, graph.ErrNoCheckpoint) {
				t.Errorf("Load(%q) after Delete: error = %v, want ErrNoCheckpoint", thread, err)
			}
		}
	})
}

// TestStoreMiniredis runs the contract on the embedded Redis used when no
// REDIS_URL is configured.
func TestStoreMiniredis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	graphtest.TestStore(t, func(t *testing.T) graph.Store {
		return redisstore.New(rdb, redisstore.Options{HistoryLimit: graphtest.HistoryLimit})
	})
}

func TestKeyLayout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	prefix := uniqueName("layout")
	store := redisstore.New(rdb, redisstore.Options{Prefix: prefix})

	tests := []struct {
		thread string
		tag    string
	}{
		{"T1:C2:1712345678.000100", "T1:C2:1712345678.000100"},
		{"a{b}c", "a%7Bb%7Dc"},
		{"100%", "100%25"},
	}
	for _, tt := range tests {
		mustSave(t, store, firstCheckpoint(tt.thread, "hello"))
		if _, _, err := store.Claim(ctx, tt.thread, "call_1", []byte("approve")); err != nil {
			t.Fatalf("Claim(%q) error = %v", tt.thread, err)
		}
		for _, suffix := range []string{"journal", "history", "claims"} {
			key := fmt.Sprintf("%s:{%s}:%s", prefix, tt.tag, suffix)
			if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 1 {
				t.Errorf("EXISTS %s after a save of thread %q = %d, %v; want 1", key, tt.thread, n, err)
			}
		}
	}
}

func TestEmptyThread(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := redisstore.New(redistest.Client(t), redisstore.Options{})
	if _, err := store.Load(ctx, ""); !errors.Is(err, redisstore.ErrEmptyThread) {
		t.Errorf("Load(\"\") error = %v, want ErrEmptyThread", err)
	}
	if err := store.Save(ctx, firstCheckpoint("", "hi")); !errors.Is(err, redisstore.ErrEmptyThread) {
		t.Errorf("Save(thread \"\") error = %v, want ErrEmptyThread", err)
	}
	if _, _, err := store.Claim(ctx, "", "k", []byte("v")); !errors.Is(err, redisstore.ErrEmptyThread) {
		t.Errorf("Claim(\"\") error = %v, want ErrEmptyThread", err)
	}
}

// TestLargeSave saves more journal entries at once than Lua can pass to one
// command.
func TestLargeSave(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	mini := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { mini.Close() })
	clients := map[string]redis.UniversalClient{"redis": redistest.Client(t), "miniredis": mini}

	for name, rdb := range clients {
		t.Run(name, func(t *testing.T) {
			store := redisstore.New(rdb, redisstore.Options{})
			conv := newConversation(uniqueName(t.Name()), 2500)
			mustSave(t, store, conv.head)
			got, err := store.Load(t.Context(), conv.head.Thread)
			if err != nil {
				t.Fatalf("Load() error = %v", err)
			}
			if len(got.Journal) != 2500 || string(got.Journal[2499]) != string(conv.head.Journal[2499]) {
				t.Errorf("Load() journal has %d entries, want the 2500 saved", len(got.Journal))
			}
		})
	}
}

func TestClaim(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := redisstore.New(redistest.Client(t), redisstore.Options{})
	thread := uniqueName(t.Name())

	const clickers = 20
	type result struct {
		winner []byte
		won    bool
		err    error
	}
	results := make([]result, clickers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clickers {
		wg.Go(func() {
			<-start
			value := fmt.Appendf(nil, `{"kind":"approve","by":"U%02d"}`, i)
			w, won, err := store.Claim(ctx, thread, "call_1", value)
			results[i] = result{w, won, err}
		})
	}
	close(start)
	wg.Wait()

	var winners []int
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("Claim() by clicker %d error = %v", i, r.err)
		}
		if r.won {
			winners = append(winners, i)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d concurrent claims: %d won (%v), want exactly 1", clickers, len(winners), winners)
	}
	want := string(results[winners[0]].winner)
	for i, r := range results {
		if string(r.winner) != want {
			t.Errorf("Claim() by clicker %d returned winner %s, want %s", i, r.winner, want)
		}
	}

	// Other keys are claimed independently; a repeated claim by the winner
	// is not won again.
	if _, won, err := store.Claim(ctx, thread, "call_2", []byte("reject")); err != nil || !won {
		t.Errorf("Claim(call_2) = won %v, %v; want won", won, err)
	}
	if w, won, err := store.Claim(ctx, thread, "call_1", []byte(want)); err != nil || won || string(w) != want {
		t.Errorf("Claim(call_1) again = %s, won %v, %v; want %s, not won", w, won, err, want)
	}
	claims, err := store.Claims(ctx, thread)
	if err != nil {
		t.Fatalf("Claims() error = %v", err)
	}
	if len(claims) != 2 || string(claims["call_1"]) != want || string(claims["call_2"]) != "reject" {
		t.Errorf("Claims() = %q, want call_1 → %s and call_2 → reject", claims, want)
	}
	if claims, err := store.Claims(ctx, uniqueName("nobody")); err != nil || len(claims) != 0 {
		t.Errorf("Claims(unknown thread) = %q, %v; want empty", claims, err)
	}
}

func TestLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := redisstore.New(redistest.Client(t), redisstore.Options{})
	thread := uniqueName(t.Name())

	var a, b string // the tokens of a's and b's acquisitions
	acquire := func(owner string, tok *string, ttl time.Duration) func() (bool, error) {
		return func() (bool, error) {
			got, err := store.AcquireLease(ctx, thread, owner, ttl)
			if got != "" {
				*tok = got
			}
			return got != "", err
		}
	}
	var dummy string
	steps := []struct {
		name string
		do   func() (bool, error)
		want bool
	}{
		{"a acquires", acquire("a", &a, time.Minute), true},
		{"b acquires a held lease", acquire("b", &dummy, time.Minute), false},
		{"a acquires its own lease again", acquire("a", &dummy, time.Minute), false},
		{"b renews a's lease with a's name", func() (bool, error) { return store.RenewLease(ctx, thread, "a", time.Minute) }, false},
		{"a renews", func() (bool, error) { return store.RenewLease(ctx, thread, a, time.Minute) }, true},
		{"b releases a's lease with a's name", func() (bool, error) { return true, store.ReleaseLease(ctx, thread, "a") }, true},
		{"b acquires after its release did nothing", acquire("b", &dummy, time.Minute), false},
		{"a releases", func() (bool, error) { return true, store.ReleaseLease(ctx, thread, a) }, true},
		{"a renews a released lease", func() (bool, error) { return store.RenewLease(ctx, thread, a, time.Minute) }, false},
		{"b acquires a released lease", acquire("b", &b, 50*time.Millisecond), true},
	}
	for _, step := range steps {
		got, err := step.do()
		if err != nil {
			t.Fatalf("%s: error = %v", step.name, err)
		}
		if got != step.want {
			t.Fatalf("%s = %v, want %v", step.name, got, step.want)
		}
	}
	if !strings.HasPrefix(a, "a:") || !strings.HasPrefix(b, "b:") || dummy != "" {
		t.Errorf("tokens a %q, b %q; want each to begin with its owner's name", a, b)
	}

	// b's 50ms lease lapses and a can take it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		tok, err := store.AcquireLease(ctx, thread, "a", time.Minute)
		if err != nil {
			t.Fatalf("AcquireLease(a) error = %v", err)
		}
		if tok != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("AcquireLease(a) after b's 50ms lease lapsed: still held after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok, err := store.RenewLease(ctx, thread, b, time.Minute); err != nil || ok {
		t.Errorf("RenewLease(b) after its lease lapsed = %v, %v; want false", ok, err)
	}
	if _, err := store.AcquireLease(ctx, thread, "a", 0); err == nil {
		t.Error("AcquireLease(ttl 0) = nil error, want an error")
	}
	if _, err := store.RenewLease(ctx, thread, "", time.Minute); err == nil {
		t.Error("RenewLease(empty token) = nil error, want an error")
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	prefix := uniqueName("expiry")
	store := redisstore.New(rdb, redisstore.Options{Prefix: prefix, TTL: time.Hour, Now: func() time.Time { return now }})
	thread := uniqueName(t.Name())
	key := func(suffix string) string { return fmt.Sprintf("%s:{%s}:%s", prefix, thread, suffix) }
	threadKeys := []string{key("journal"), key("history"), key("claims")}

	// checkTTL checks every key's TTL is within a minute below want.
	checkTTL := func(when string, keys []string, want time.Duration) {
		t.Helper()
		for _, k := range keys {
			ttl, err := rdb.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatalf("PTTL %s: %v", k, err)
			}
			if ttl > want || ttl < want-time.Minute {
				t.Errorf("%s: PTTL %s = %v, want about %v", when, k, ttl, want)
			}
		}
	}

	first := firstCheckpoint(thread, "hello")
	mustSave(t, store, first)
	if _, _, err := store.Claim(ctx, thread, "call_1", []byte("approve")); err != nil {
		t.Fatalf("Claim() error = %v", err)
	}
	if _, err := store.AcquireLease(ctx, thread, "runner-1", 30*time.Second); err != nil {
		t.Fatalf("AcquireLease() error = %v", err)
	}
	checkTTL("after a save without KeepUntil", threadKeys, time.Hour)

	// A pause whose approvals expire in two days keeps the thread that
	// long, plus the margin.
	paused := nextCheckpoint(first, "need approval")
	paused.Status = graph.Paused
	paused.KeepUntil = now.Add(48 * time.Hour)
	mustSave(t, store, paused)
	checkTTL("after a save with KeepUntil in 48h", threadKeys, 49*time.Hour)

	// A claim made now lives as long as the thread.
	other := uniqueName(t.Name())
	otherFirst := firstCheckpoint(other, "hi")
	otherFirst.KeepUntil = now.Add(72 * time.Hour)
	mustSave(t, store, otherFirst)
	if _, _, err := store.Claim(ctx, other, "call_1", []byte("approve")); err != nil {
		t.Fatalf("Claim() error = %v", err)
	}
	checkTTL("a claim in a thread kept 72h", []string{fmt.Sprintf("%s:{%s}:claims", prefix, other)}, 73*time.Hour)

	// A later save does not shorten the expiry.
	done := nextCheckpoint(paused, "done")
	mustSave(t, store, done)
	checkTTL("after a save without KeepUntil that follows one with", threadKeys, 49*time.Hour)

	// A save sets expiries that have run down again. (Time is made to
	// pass: the store's clock moves on, and the expiries are shortened as
	// much.)
	now = now.Add(49*time.Hour - 20*time.Minute)
	for _, k := range threadKeys {
		rdb.PExpire(ctx, k, 20*time.Minute)
	}
	again := nextCheckpoint(done, "later")
	mustSave(t, store, again)
	checkTTL("after a save that follows a run-down expiry", threadKeys, time.Hour)

	// A journal that a save creates expires with the thread.
	quiet := firstCheckpoint(uniqueName(t.Name())) // no entries yet
	mustSave(t, store, quiet)
	mustSave(t, store, nextCheckpoint(quiet, "first words"))
	checkTTL("a journal created by a later save", []string{fmt.Sprintf("%s:{%s}:journal", prefix, quiet.Thread)}, time.Hour)

	// Saves leave the lease's own expiry alone.
	checkTTL("the lease", []string{key("lease")}, 30*time.Second)

	// A TTL shorter than the refresh slack still applies.
	brief := redisstore.New(rdb, redisstore.Options{Prefix: prefix, TTL: 10 * time.Second})
	short := firstCheckpoint(uniqueName(t.Name()), "hi")
	mustSave(t, brief, short)
	head := fmt.Sprintf("%s:{%s}:claims", prefix, short.Thread)
	if ttl, err := rdb.PTTL(ctx, head).Result(); err != nil || ttl <= 8*time.Second || ttl > 10*time.Second {
		t.Errorf("PTTL %s with TTL 10s = %v, %v; want about 10s", head, ttl, err)
	}
}

// TestHistoryStaysNearItsCap checks what a long thread keeps of its
// checkpoints: the newest HistoryLimit are read back, and the list
// Redis holds never runs more than a tenth over that cap, however many
// saves the thread sees.
func TestHistoryStaysNearItsCap(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	prefix := uniqueName("history")
	const limit = 20
	store := redisstore.New(rdb, redisstore.Options{Prefix: prefix, HistoryLimit: limit})
	thread := uniqueName(t.Name())
	key := fmt.Sprintf("%s:{%s}:history", prefix, thread)

	cp := firstCheckpoint(thread, "hello")
	mustSave(t, store, cp)
	longest := int64(0)
	for range 3 * limit {
		cp = nextCheckpoint(cp, "again")
		mustSave(t, store, cp)
		n, err := rdb.LLen(ctx, key).Result()
		if err != nil {
			t.Fatalf("LLEN %s: %v", key, err)
		}
		if n > limit+limit/10 {
			t.Fatalf("after save %d the history holds %d checkpoints, want at most %d", cp.Seq, n, limit+limit/10)
		}
		longest = max(longest, n)
	}
	if longest <= limit {
		t.Errorf("the history never held more than %d checkpoints: want it trimmed a tenth over its cap, not at every save", longest)
	}
	history, err := store.History(ctx, thread)
	if err != nil {
		t.Fatalf("History() error = %v", err)
	}
	if len(history) != limit || history[0].ID != cp.ID || history[limit-1].Seq != cp.Seq-limit+1 {
		t.Errorf("History() = %d checkpoints from seq %d; want the newest %d, from %d", len(history), history[0].Seq, limit, cp.Seq)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	prefix := uniqueName("delete")
	store := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	thread := uniqueName(t.Name())

	first := firstCheckpoint(thread, "hello")
	mustSave(t, store, first)
	mustSave(t, store, nextCheckpoint(first, "again"))
	if _, _, err := store.Claim(ctx, thread, "call_1", []byte("approve")); err != nil {
		t.Fatalf("Claim() error = %v", err)
	}
	if _, err := store.AcquireLease(ctx, thread, "runner-1", time.Minute); err != nil {
		t.Fatalf("AcquireLease() error = %v", err)
	}

	if err := store.Delete(ctx, thread); err != nil {
		t.Fatalf("Delete() error = %v", err)
	}
	if _, err := store.Load(ctx, thread); !errors.Is(err, graph.ErrNoCheckpoint) {
		t.Errorf("Load() after Delete: error = %v, want ErrNoCheckpoint", err)
	}
	keys, err := rdb.Keys(ctx, prefix+":*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("keys left after Delete = %q, %v; want none", keys, err)
	}
	// The thread can start over.
	mustSave(t, store, firstCheckpoint(thread, "new start"))
	if err := store.Delete(ctx, uniqueName("nobody")); err != nil {
		t.Errorf("Delete(unknown thread) error = %v, want nil", err)
	}
}

// TestRedisRestart checks that a save acknowledged before Redis crashed is
// there after it restarts, and that a save while Redis is down is an error,
// not a conflict.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	store := redisstore.New(rdb, redisstore.Options{})
	thread := uniqueName(t.Name())

	first := firstCheckpoint(thread, "hello")
	mustSave(t, store, first)
	srv.Kill()

	second := nextCheckpoint(first, "while down")
	if err := store.Save(ctx, second); err == nil || errors.Is(err, graph.ErrConflict) {
		t.Errorf("Save() while Redis is down: error = %v, want a connection error", err)
	}
	if err := store.Ping(ctx); err == nil {
		t.Error("Ping() while Redis is down = nil, want an error")
	}

	srv.Restart() // the restarted server has no scripts cached
	got, err := store.Load(ctx, thread)
	if err != nil {
		t.Fatalf("Load() after restart: error = %v", err)
	}
	if got.Seq != 1 || len(got.Journal) != 1 {
		t.Errorf("Load() after restart = seq %d with %d entries, want seq 1 with 1", got.Seq, len(got.Journal))
	}
	mustSave(t, store, second)
}

// TestBytesPerSave checks that what a save writes to Redis does not grow
// with the conversation.
func TestBytesPerSave(t *testing.T) {
	t.Parallel()
	var written atomic.Int64
	store := redisstore.New(countingClient(t, &written), redisstore.Options{})

	perSave := make(map[int]int64)
	for _, size := range []int{10, 1000} {
		conv := newConversation(uniqueName(t.Name()), size)
		mustSave(t, store, conv.head)
		mustSave(t, store, conv.next()) // loads the script
		const saves = 10
		before := written.Load()
		for range saves {
			mustSave(t, store, conv.next())
		}
		perSave[size] = (written.Load() - before) / saves
	}
	t.Logf("bytes per save: %d at 10 messages, %d at 1000", perSave[10], perSave[1000])
	// A few digits grow (seq, journal length); nothing else may.
	if perSave[1000] > perSave[10]+32 {
		t.Errorf("bytes per save = %d at 1000 messages, %d at 10; want no growth", perSave[1000], perSave[10])
	}
}

// countingClient returns a client of the test Redis with one connection
// that adds every byte it writes to written.
func countingClient(tb testing.TB, written *atomic.Int64) *redis.Client {
	tb.Helper()
	opts := redistest.Options(tb)
	opts.PoolSize = 1
	tlsConfig := opts.TLSConfig
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conn = &countingConn{Conn: conn, written: written}
		if tlsConfig != nil {
			conn = tls.Client(conn, tlsConfig)
		}
		return conn, nil
	}
	rdb := redis.NewClient(opts)
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

type countingConn struct {
	net.Conn
	written *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

func mustSave(tb testing.TB, store *redisstore.Store, cp *graph.Checkpoint) {
	tb.Helper()
	if err := store.Save(context.Background(), cp); err != nil {
		tb.Fatalf("Save(%s seq %d) error = %v", cp.Thread, cp.Seq, err)
	}
}

func uniqueName(base string) string {
	return fmt.Sprintf("%s-%016x", base, rand.Uint64())
}

func firstCheckpoint(thread string, texts ...string) *graph.Checkpoint {
	cp := &graph.Checkpoint{
		Version: graph.SchemaVersion,
		Thread:  thread,
		ID:      "cp-1",
		Seq:     1,
		Status:  graph.Running,
		State:   json.RawMessage(`{}`),
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	for _, text := range texts {
		entry, _ := json.Marshal(map[string]string{"role": "user", "content": text})
		cp.Journal = append(cp.Journal, entry)
	}
	cp.JournalLen = len(cp.Journal)
	return cp
}

func nextCheckpoint(prev *graph.Checkpoint, texts ...string) *graph.Checkpoint {
	cp := firstCheckpoint(prev.Thread, texts...)
	cp.Seq = prev.Seq + 1
	cp.ID = fmt.Sprintf("cp-%d", cp.Seq)
	cp.Parent = prev.ID
	cp.JournalFrom = prev.JournalLen
	cp.JournalLen += prev.JournalLen
	return cp
}

func TestRunnerStoreContract(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	runnertest.TestStore(t, func(t *testing.T) runnertest.Store {
		return redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("runner")})
	})
}

// The leases' contract that needs no clock holds on a Redis Cluster (the
// scripts that take and release a lease touch the thread's slot only)
// and on the embedded Redis of the playground and of bot chat: every
// acquisition, by whatever call, has a token of its own.
func TestLeasesContractCluster(t *testing.T) {
	t.Parallel()
	rdb := redistest.Cluster(t)
	runnertest.TestLeases(t, func(t *testing.T) runnertest.Store {
		return redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("runner")})
	})
}

func TestLeasesContractEmbedded(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	runnertest.TestLeases(t, func(t *testing.T) runnertest.Store {
		return redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("runner")})
	})
}

// The sessions' part of the runner contract — the one path the service
// takes — holds on every kind of Redis the store runs on.
func TestSessionsContract(t *testing.T) {
	t.Parallel()
	for name, server := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			rdb := server(t)
			runnertest.TestSessions(t, func(t *testing.T) runnertest.Stores {
				s := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("sessions")})
				return runnertest.Stores{Store: s, Checkpoints: s}
			})
		})
	}
}

// everyRedis starts each kind of Redis the store runs on: a single
// server, a Cluster and the embedded one.
func everyRedis() map[string]func(t *testing.T) redis.UniversalClient {
	return map[string]func(t *testing.T) redis.UniversalClient{
		"single":  func(t *testing.T) redis.UniversalClient { return redistest.Client(t) },
		"cluster": func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) },
		"embedded": func(t *testing.T) redis.UniversalClient {
			rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { rdb.Close() })
			return rdb
		},
	}
}

// A save is fenced by the token of one acquisition of the thread's
// lease: a token of an earlier acquisition — by the same owner too —
// writes nothing once the lease was taken again, nor when it is free.
func TestSaveFencedByTheAcquisition(t *testing.T) {
	t.Parallel()
	servers := everyRedis()
	for name, rdb := range servers {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := redisstore.New(rdb(t), redisstore.Options{Prefix: uniqueName("fence")})
			thread := uniqueName("T1:C1")
			earlier, err := store.AcquireLease(ctx, thread, "runner-1", time.Minute)
			if err != nil || earlier == "" {
				t.Fatalf("AcquireLease = %q, %v", earlier, err)
			}
			first := firstCheckpoint(thread, "hello")
			if err := store.Save(graph.WithFence(ctx, earlier), first); err != nil {
				t.Fatalf("Save(fenced by the holder's token) = %v", err)
			}
			if err := store.ReleaseLease(ctx, thread, earlier); err != nil {
				t.Fatal(err)
			}
			second := nextCheckpoint(first, "again")
			if err := store.Save(graph.WithFence(ctx, earlier), second); !errors.Is(err, redisstore.ErrFenced) {
				t.Errorf("Save(fenced, the lease free) = %v, want ErrFenced", err)
			}
			later, err := store.AcquireLease(ctx, thread, "runner-1", time.Minute)
			if err != nil || later == "" || later == earlier {
				t.Fatalf("AcquireLease(runner-1 again) = %q, %v; want a token other than %q", later, err, earlier)
			}
			if err := store.Save(graph.WithFence(ctx, earlier), second); !errors.Is(err, redisstore.ErrFenced) {
				t.Errorf("Save(fenced by runner-1's earlier token) = %v, want ErrFenced", err)
			}
			if got, err := store.Load(ctx, thread); err != nil || got.Seq != first.Seq {
				t.Fatalf("Load after the fenced saves = %+v, %v; want the first checkpoint", got, err)
			}
			if err := store.Save(graph.WithFence(ctx, later), second); err != nil {
				t.Errorf("Save(fenced by the later token) = %v", err)
			}
		})
	}
}
