package redisstore_test

import (
	"errors"
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
	ctx := t.Context()
	rdb := redistest.Client(t)
	prefix := uniqueName("earlier")
	s := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	first := firstCheckpoint("T1:C1:1.1", "hello", "hi")
	mustSave(t, s, first)
	claims, head := prefix+":{T1:C1:1.1}:claims", prefix+":{T1:C1:1.1}:head"
	moveHeadToEarlierKey(t, rdb, claims, head)

	again := firstCheckpoint("T1:C1:1.1", "someone else's start")
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
// embedded Redis.
func TestClaimDecisionReadsBackWhatItWrote(t *testing.T) {
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
