package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// TestFirstSaveOfAThreadAnEarlierVersionKept: a thread whose head is in
// the head key of an earlier version (cs:{thread}:head) is not taken for
// a new one: a save of a first checkpoint conflicts and writes nothing,
// and the save that follows the head there is made, and moves the head.
func TestFirstSaveOfAThreadAnEarlierVersionKept(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	prefix := uniqueName("earlier")
	s := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	first := firstCheckpoint("T1:C1:1.1", "hello", "hi")
	mustSave(t, s, first)
	claims, head := prefix+":{T1:C1:1.1}:claims", prefix+":{T1:C1:1.1}:head"
	moveHeadToEarlierKey(t, rdb, claims, head)

	again := firstCheckpoint("T1:C1:1.1", "someone else's start")
	again.ID = "cp-1-other" // checkpoint IDs are random: another start's is not the head's
	if err := s.Save(ctx, again); !errors.Is(err, graph.ErrConflict) {
		t.Fatalf("Save(a first checkpoint) of a thread an earlier version kept: error = %v; want ErrConflict", err)
	}
	if cp, err := s.Load(ctx, first.Thread); err != nil || cp.ID != first.ID || cp.JournalLen != 2 {
		t.Fatalf("Load() after the refused save = %+v, %v; want %s with 2 entries", cp, err, first.ID)
	}
	next := nextCheckpoint(first, "next")
	mustSave(t, s, next)
	cp, err := s.Load(ctx, first.Thread)
	if err != nil || cp.ID != next.ID || len(cp.Journal) != 3 || string(cp.Journal[0]) != string(first.Journal[0]) {
		t.Fatalf("Load() after the next save = %+v, %v; want %s with the 3 entries", cp, err, next.ID)
	}
	if rdb.Exists(ctx, head).Val() != 0 {
		t.Errorf("the earlier head key is still there after a save")
	}
}

// moveHeadToEarlierKey lays a thread's head out as an earlier version
// kept it: in a hash of its own, not in the claims hash.
func moveHeadToEarlierKey(t *testing.T, rdb redis.UniversalClient, claims, head string) {
	t.Helper()
	ctx := t.Context()
	h, err := rdb.HMGet(ctx, claims, "@seq", "@len", "@id").Result()
	if err != nil || h[0] == nil {
		t.Fatalf("the head in the claims hash = %v, %v; want it there", h, err)
	}
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, claims, "@seq", "@len", "@id", "@exp")
		p.HSet(ctx, head, "seq", h[0], "journal_len", h[1], "id", h[2])
		p.PExpire(ctx, head, time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestClaimDecisionReadsBackWhatItWrote: the claims a decision's claim
// reads back when it takes the lease are those the thread holds after
// it — its own claim, the deliveries it recorded, "answered" as it left
// it, and the others as they were — on a single server and on the
// embedded Redis; and so are those the opening of the thread reads back.
func TestClaimDecisionReadsBackWhatItWrote(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]redis.UniversalClient{"redis": redistest.Client(t), "embedded": embedded(t)} {
		t.Run(name, func(t *testing.T) {
			for _, tt := range []struct {
				name           string
				stored, answer int
				want           string
			}{
				{"answered grows", 1, 2, "2"},
				{"answered stays", 3, 2, "3"},
				{"answered unset", 0, 2, "2"},
			} {
				t.Run(tt.name, func(t *testing.T) {
					ctx := t.Context()
					s := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("readback")})
					const thread = "T1:C1:1.1"
					first := firstCheckpoint(thread, "hello")
					mustSave(t, s, first)
					for key, v := range map[string]string{"other": "x", "announced:c0": "1"} {
						if _, won, err := s.Claim(ctx, thread, key, []byte(v)); err != nil || !won {
							t.Fatalf("Claim(%s) = %v, %v", key, won, err)
						}
					}
					if tt.stored > 0 {
						if _, _, err := s.Claim(ctx, thread, "answered", []byte{byte('0' + tt.stored)}); err != nil {
							t.Fatal(err)
						}
					}
					keys := []string{"answered", "decision:c1", "announced:c1", "announced:c0", "other", "missing"}
					got, err := s.ClaimDecision(ctx, runner.DecisionClaim{
						Thread: thread, Key: "decision:c1", Value: []byte("approve"), ExpectHead: first.ID,
						LeaseOwner: "p1", LeaseTTL: time.Minute, Keys: keys,
						Record: []string{"announced:c1", "announced:c0"}, Answered: tt.answer,
					})
					if err != nil || !got.Won || !got.Leased || got.Head != first.ID {
						t.Fatalf("ClaimDecision() = %+v, %v; want won, leased, head %s", got, err, first.ID)
					}
					stored, err := s.ClaimValues(ctx, thread, keys)
					if err != nil {
						t.Fatal(err)
					}
					if !maps.EqualFunc(got.Claims, stored, func(a, b []byte) bool { return string(a) == string(b) }) {
						t.Errorf("claims read back = %q; the thread holds %q", got.Claims, stored)
					}
					if string(stored["answered"]) != tt.want || string(stored["decision:c1"]) != "approve" || string(stored["announced:c1"]) != "1" {
						t.Errorf("the thread holds %q; want answered %s, the decision and the delivery", stored, tt.want)
					}

					// The next holding of the thread records what the
					// last one showed, and reads back the same way.
					if err := s.ReleaseLease(ctx, thread, got.Token); err != nil {
						t.Fatal(err)
					}
					keys = append(keys, "announced:c2")
					opened, err := s.OpenThread(ctx, runner.Opening{Thread: thread, Owner: "p2", TTL: time.Minute, Keys: keys,
						Record: []string{"announced:c2", "other"}, Answered: tt.answer + 1})
					if err != nil || !opened.Held || opened.Head != first.ID {
						t.Fatalf("OpenThread() = %+v, %v; want held, head %s", opened, err, first.ID)
					}
					if stored, err = s.ClaimValues(ctx, thread, keys); err != nil {
						t.Fatal(err)
					}
					if !maps.EqualFunc(opened.Claims, stored, func(a, b []byte) bool { return string(a) == string(b) }) {
						t.Errorf("claims read back by OpenThread = %q; the thread holds %q", opened.Claims, stored)
					}
				})
			}
		})
	}
}

func embedded(t *testing.T) redis.UniversalClient {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestInboxWatchersAreReadOnceEach: an inbox update says who opened the
// Home tab — people who opened it through another replica included, with
// their latest opening, and not those who opened it longer ago than the
// store keeps threads — while it reads from Redis only the openings that
// are new to it, not the whole index of openers at every update.
func TestInboxWatchersAreReadOnceEach(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	opts := redistest.Options(t)
	other := redis.NewClient(opts)
	t.Cleanup(func() { other.Close() })
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	read := &watchersRead{}
	rdb.AddHook(read)
	prefix := uniqueName("watchers")
	now := time.Now().Truncate(time.Millisecond)
	clock := func() time.Time { return now }
	s := redisstore.New(rdb, redisstore.Options{Prefix: prefix, TTL: 24 * time.Hour, Now: clock})
	replica := redisstore.New(other, redisstore.Options{Prefix: prefix, TTL: 24 * time.Hour, Now: clock})

	// 300 people opened the tab, a minute apart, the last an hour ago.
	for i := range 300 {
		if err := replica.HomeOpened(ctx, fmt.Sprintf("U%03d", i), now.Add(-time.Hour-time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	update := func() map[string]time.Time {
		t.Helper()
		u := &runner.InboxUpdate{Thread: "T1:C1:1.1", Waiting: []runner.InboxEntry{{Thread: "T1:C1:1.1", Call: "1.0"}}}
		if err := s.UpdateInbox(ctx, u); err != nil {
			t.Fatal(err)
		}
		out := make(map[string]time.Time, len(u.Watchers))
		for _, w := range u.Watchers {
			out[w.User] = w.At
		}
		return out
	}
	if got, at := update(), now.Add(-time.Hour-7*time.Minute); len(got) != 300 || !got["U007"].Equal(at) {
		t.Fatalf("first update: %d watchers, U007 at %v; want 300, at %v", len(got), got["U007"], at)
	}
	if err := replica.HomeOpened(ctx, "U_CAROL", now); err != nil {
		t.Fatal(err)
	}
	if err := replica.HomeOpened(ctx, "U007", now); err != nil {
		t.Fatal(err)
	}
	read.n = 0
	got := update()
	if at := now.Add(-time.Hour - 8*time.Minute); len(got) != 301 || !got["U_CAROL"].Equal(now) || !got["U007"].Equal(now) || !got["U008"].Equal(at) {
		t.Errorf("after two openings through another replica: %d watchers, U_CAROL at %v, U007 at %v, U008 at %v; want 301, the two now, U008 at %v",
			len(got), got["U_CAROL"], got["U007"], got["U008"], at)
	}
	// The two new openings, and those of the ten minutes before the
	// newest read until then (homeOverlap), not the 300.
	if read.n > 2+11 {
		t.Errorf("the update read %d openings from Redis; want the 2 new ones and at most the 11 of the ten minutes before", read.n)
	}

	// A day later, when someone opens it, the index forgets those who
	// opened it more than a day before, and so does the update.
	now = now.Add(24*time.Hour - time.Minute)
	if err := replica.HomeOpened(ctx, "U_DAN", now); err != nil {
		t.Fatal(err)
	}
	if got := update(); len(got) != 3 {
		t.Errorf("a day later: %d watchers; want the 3 who opened it within the day", len(got))
	}
}

// watchersRead counts the openings of the Home tab that the inbox's
// updates read (the second item of their reply: user, time, …).
type watchersRead struct{ n int }

func (r *watchersRead) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *watchersRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok {
			if reply, ok := c.Val().([]any); ok && len(reply) == 2 {
				if w, ok := reply[1].([]any); ok {
					r.n += len(w) / 2
				}
			}
		}
		return err
	}
}
func (r *watchersRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
