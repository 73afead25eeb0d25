package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/runner/runnertest"
)

// holdHook holds, once armed, the first command a client sends that
// names key, until release is closed; held is closed when it arrives.
type holdHook struct {
	key     string
	armed   chan struct{} // closed to arm
	held    chan struct{}
	release chan struct{}
}

func newHoldHook(key string) *holdHook {
	return &holdHook{key: key, armed: make(chan struct{}), held: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		select {
		case <-h.armed:
		default:
			return next(ctx, cmd)
		}
		if !slices.ContainsFunc(cmd.Args(), func(a any) bool { return argIs(a, h.key) }) {
			return next(ctx, cmd)
		}
		select {
		case <-h.held: // already held one: the rest go through
		default:
			close(h.held)
			select {
			case <-h.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// argIs reports whether a command's argument is s: a string, or a
// pointer to one (the Store passes a script's keys after the first so).
func argIs(a any, s string) bool {
	if p, ok := a.(*string); ok {
		return *p == s
	}
	return fmt.Sprint(a) == s
}

func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A close on a cluster releases the lease in the thread's slot and then
// writes the schedule, in another slot. When that write is late — its
// process stalled, or the schedule's master failing over — another
// replica may have taken the thread in between and set its recovery
// wake-up, a lease away. The late write of the earlier holder must leave
// that wake-up alone: moved to the earlier holder's wake-up (the calls'
// expiry, an hour away) or removed, the thread whose new holder dies
// would wait an hour, or forever, instead of a lease.
func TestLateCloseKeepsTheNextHoldersWakeup(t *testing.T) {
	t.Parallel()
	rdb := redistest.Cluster(t).(*redis.ClusterClient)
	for _, takes := range []string{"claim", "open"} {
		for _, forget := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/forget=%v", takes, forget), func(t *testing.T) {
				lateCloseRace(t, rdb, uniqueName("late"), uniqueName("T1:C1"), takes, forget, nil)
			})
		}
	}
}

// The same with the master of the thread and of the schedule failed
// over while the close's write is on its way — by CLUSTER FAILOVER, and
// killed: the write follows the slot to its new master, and still loses
// to the later holder's wake-up.
func TestLateCloseAcrossAFailover(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"failover", "kill"} {
		t.Run(how, func(t *testing.T) {
			cluster := redistest.ClusterWithReplicas(t)
			prefix := uniqueName("late")
			thread := threadBesideTheSchedule(t, cluster.Client, prefix)
			lateCloseRace(t, cluster.Client, prefix, thread, "claim", false, func(t *testing.T, wakeups string, clients ...*redis.ClusterClient) {
				if how == "failover" {
					cluster.Failover(t, wakeups)
					return
				}
				cluster.KillMaster(t, wakeups)
				// A client learns of the new master when its map is
				// reloaded: until then a write to the dead node fails, and
				// the bot answers "try again". The race is about what
				// comes after.
				for _, c := range clients {
					followed(t, c, wakeups)
				}
			})
		})
	}
}

// followed waits until c reaches the master of key's slot.
func followed(t *testing.T, c *redis.ClusterClient, key string) {
	ctx := t.Context()
	for {
		err := c.ZCard(ctx, key).Err()
		if err == nil {
			return
		}
		c.ReloadState(ctx)
		select {
		case <-ctx.Done():
			t.Fatalf("the client never reached the new master of %s: %v", key, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// threadBesideTheSchedule returns a thread whose keys have the same
// master as the schedule's.
func threadBesideTheSchedule(t *testing.T, rdb *redis.ClusterClient, prefix string) string {
	ctx := t.Context()
	schedule, err := rdb.MasterForKey(ctx, prefix+":wakeups")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		thread := fmt.Sprintf("T1:C1:%d", i)
		m, err := rdb.MasterForKey(ctx, prefix+":{"+thread+"}:lease")
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == schedule.Options().Addr {
			return thread
		}
	}
	t.Fatal("no thread beside the schedule in 1000 names")
	return ""
}

// lateCloseRace has holder A close the thread with its schedule write
// held back, holder B take the thread (by a decision's claim or by
// opening it) and set its wake-up, then lets A's write through, and
// checks that the thread is still due by B's wake-up — and that B's own
// close, later, still sets the schedule. between runs while A's write is held, before B.
func lateCloseRace(t *testing.T, rdb *redis.ClusterClient, prefix, thread, takes string, forget bool,
	between func(t *testing.T, wakeups string, clients ...*redis.ClusterClient)) {
	ctx := t.Context()
	wakeups := prefix + ":wakeups"
	const lease = 10 * time.Second

	// A is another replica: a client of its own, whose write to the
	// schedule the test holds back.
	opts := *rdb.Options()
	rdbA := redis.NewClusterClient(&opts)
	t.Cleanup(func() { rdbA.Close() })
	hold := newHoldHook(wakeups)
	rdbA.AddHook(hold)
	a := redisstore.New(rdbA, redisstore.Options{Prefix: prefix})
	b := redisstore.New(rdb, redisstore.Options{Prefix: prefix})

	now := time.Now()
	opened, err := a.OpenThread(ctx, runner.Opening{Thread: thread, Owner: "replica-a", TTL: lease,
		WakeIfHeld: now.Add(lease)})
	if err != nil || !opened.Held {
		t.Fatalf("A: OpenThread = %+v, %v; want the lease", opened, err)
	}

	// A's run paused on a call that waits for a person until its expiry
	// (or finished: no wake-up); A closes.
	var aWake time.Time
	if !forget {
		aWake = now.Add(time.Hour)
	}
	close(hold.armed)
	closed := make(chan error, 1)
	go func() {
		_, err := a.CloseThread(ctx, runner.Closing{Thread: thread, Token: opened.Token, Answered: -1,
			Schedule: true, Wake: aWake, Waiting: 1})
		closed <- err
	}()
	select {
	case <-hold.held:
	case err := <-closed:
		t.Fatalf("A: CloseThread returned (%v) without writing the schedule", err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if between != nil {
		between(t, wakeups, rdb, rdbA)
	}

	// B takes the thread, the lease A released, and sets its recovery
	// wake-up.
	bWake := time.Now().Add(lease)
	var bToken string
	switch takes {
	case "claim":
		got, err := b.ClaimDecision(ctx, runner.DecisionClaim{Thread: thread, Key: "decision:c1", Value: []byte("approve"),
			WakeBy: bWake, LeaseOwner: "replica-b", LeaseTTL: lease})
		if err != nil || !got.Won || !got.Leased {
			t.Fatalf("B: ClaimDecision = %+v, %v; want the claim and the lease", got, err)
		}
		bToken = got.Token
	case "open":
		got, err := b.OpenThread(ctx, runner.Opening{Thread: thread, Owner: "replica-b", TTL: lease, WakeIfHeld: bWake})
		if err != nil || !got.Held {
			t.Fatalf("B: OpenThread = %+v, %v; want the lease", got, err)
		}
		bToken = got.Token
	}

	// A's write arrives.
	close(hold.release)
	if err := <-closed; err != nil {
		t.Fatalf("A: CloseThread = %v", err)
	}
	score, err := rdb.ZScore(ctx, wakeups, thread).Result()
	if err != nil {
		t.Fatalf("B's wake-up after A's late close: ZSCORE = %v (removed by A's close)", err)
	}
	if got := int64(score); got > bWake.UnixMilli() {
		t.Fatalf("wake-up after A's late close = %v, want B's %v (a lease away) or earlier", time.UnixMilli(got), bWake)
	}
	// Should B die now, the thread is looked at within the lease.
	due, err := b.Due(ctx, bWake, 100)
	if err != nil || !slices.Contains(due, thread) {
		t.Fatalf("Due(B's wake-up) = %v, %v; want %s", due, err, thread)
	}

	// B's own close sets the schedule, later as it may be.
	bLater := time.Now().Add(2 * time.Hour)
	if _, err := b.CloseThread(ctx, runner.Closing{Thread: thread, Token: bToken, Answered: -1,
		Schedule: true, Wake: bLater, Waiting: 1}); err != nil {
		t.Fatalf("B: CloseThread = %v", err)
	}
	if score, err := rdb.ZScore(ctx, wakeups, thread).Result(); err != nil || int64(score) != bLater.UnixMilli() {
		t.Fatalf("wake-up after B's close = %v, %v; want B's %v", score, err, bLater)
	}
}

// A close by a token that no longer holds the lease — it lapsed while
// its run stalled, and another replica took the thread — does not write
// the wake-up: it is the new holder's. On a single server too, where the
// close is one script.
func TestCloseWithoutTheLeaseLeavesTheSchedule(t *testing.T) {
	t.Parallel()
	servers := everyRedis()
	for name, server := range servers {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			rdb := server(t)
			prefix := uniqueName("stale")
			store := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			thread := uniqueName("T1:C1")
			const lease = 10 * time.Second
			now := time.Now()
			a, err := store.OpenThread(ctx, runner.Opening{Thread: thread, Owner: "replica-a", TTL: lease, WakeIfHeld: now.Add(lease)})
			if err != nil || !a.Held {
				t.Fatalf("A: OpenThread = %+v, %v", a, err)
			}
			// A's lease is gone (as when it lapses) and B takes the thread.
			if err := store.ReleaseLease(ctx, thread, a.Token); err != nil {
				t.Fatal(err)
			}
			bWake := now.Add(lease / 2)
			b, err := store.OpenThread(ctx, runner.Opening{Thread: thread, Owner: "replica-b", TTL: lease, WakeIfHeld: bWake})
			if err != nil || !b.Held {
				t.Fatalf("B: OpenThread = %+v, %v", b, err)
			}
			if _, err := store.CloseThread(ctx, runner.Closing{Thread: thread, Token: a.Token, Answered: -1,
				Schedule: true, Wake: now.Add(time.Hour), Waiting: 1}); err != nil {
				t.Fatalf("A: CloseThread = %v", err)
			}
			if score, err := rdb.ZScore(ctx, prefix+":wakeups", thread).Result(); err != nil || int64(score) != bWake.UnixMilli() {
				t.Errorf("wake-up after A's close = %v, %v; want B's %v", time.UnixMilli(int64(score)), err, bWake)
			}
			if ok, err := store.RenewLease(ctx, thread, b.Token, lease); err != nil || !ok {
				t.Errorf("B: RenewLease after A's close = %v, %v; want B to hold", ok, err)
			}
		})
	}
}

// The whole runner contract — the schedule included, which on a cluster
// is in another slot than the threads — holds on a Redis Cluster.
func TestRunnerStoreContractCluster(t *testing.T) {
	t.Parallel()
	rdb := redistest.Cluster(t)
	runnertest.TestStore(t, func(t *testing.T) runnertest.Store {
		return redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("runner")})
	})
}
