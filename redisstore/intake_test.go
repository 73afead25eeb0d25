package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/redisstore"
)

// TestIntake: a request is accepted once, held by the attempt that
// accepted it; only a hold that lapsed gives it to another attempt, and an
// attempt that lost it can neither write its record nor say it started.
// On every kind of Redis the store runs on.
func TestIntake(t *testing.T) {
	for name, client := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			testIntake(t, redisstore.New(client(t), redisstore.Options{Prefix: uniqueName("intake")}))
		})
	}
}

func testIntake(t *testing.T, s *redisstore.Store) {
	ctx := context.Background()
	const id = "command:t1"
	now := time.Now()
	first, err := s.Accept(ctx, id, "a", []byte(`{"text":"deploy"}`), now.Add(15*time.Second), time.Hour)
	if err != nil || !first {
		t.Fatalf("Accept() = %v, %v; want true", first, err)
	}
	if again, err := s.Accept(ctx, id, "b", []byte(`{"text":"other"}`), now, time.Hour); err != nil || again {
		t.Errorf("Accept(repeat) = %v, %v; want false", again, err)
	}
	if due, err := s.DueIntake(ctx, "b", now, now.Add(time.Minute), 10); err != nil || len(due) != 0 {
		t.Errorf("DueIntake(before its time) = %v, %v; want nothing", due, err)
	}
	if held, err := s.UpdateIntake(ctx, id, "a", []byte(`{"text":"deploy","root":"1.2"}`), now.Add(15*time.Second)); err != nil || !held {
		t.Fatalf("UpdateIntake(holder) = %v, %v; want true", held, err)
	}
	if held, err := s.UpdateIntake(ctx, id, "b", []byte(`{"text":"other"}`), now.Add(15*time.Second)); err != nil || held {
		t.Errorf("UpdateIntake(not the holder) = %v, %v; want false", held, err)
	}
	// The holder renews its hold: the request is not due when its first
	// time comes.
	if held, err := s.HoldIntake(ctx, map[string]string{id: "a", "command:none": "a"}, now.Add(30*time.Second)); err != nil ||
		!held[id] || held["command:none"] || len(held) != 1 {
		t.Fatalf("HoldIntake() = %v, %v; want only %s", held, err, id)
	}
	if due, _ := s.DueIntake(ctx, "b", now.Add(20*time.Second), now.Add(35*time.Second), 10); len(due) != 0 {
		t.Errorf("DueIntake(a renewed hold) = %q; want nothing", due)
	}
	// The holder stops renewing (it died): the request goes to one new
	// attempt.
	later := now.Add(31 * time.Second)
	due, err := s.DueIntake(ctx, "c", later, later.Add(15*time.Second), 10)
	if err != nil || string(due[id]) != `{"text":"deploy","root":"1.2"}` {
		t.Fatalf("DueIntake(after its hold lapsed) = %q, %v; want the updated record", due, err)
	}
	if due, _ := s.DueIntake(ctx, "d", later, later.Add(15*time.Second), 10); len(due) != 0 {
		t.Errorf("DueIntake(again at once) = %q; one attempt drives a request at a time", due)
	}
	// The old holder wakes up: it holds nothing.
	if held, err := s.UpdateIntake(ctx, id, "a", []byte(`{"text":"deploy","posting":true}`), later.Add(15*time.Second)); err != nil || held {
		t.Errorf("UpdateIntake(the lapsed holder) = %v, %v; want false", held, err)
	}
	if held, _ := s.HoldIntake(ctx, map[string]string{id: "a"}, later.Add(15*time.Second)); held[id] {
		t.Error("HoldIntake(the lapsed holder) renewed a hold it lost")
	}
	if err := s.Started(ctx, id, "a"); err != nil {
		t.Fatal(err)
	}
	if held, _ := s.HoldIntake(ctx, map[string]string{id: "c"}, later.Add(15*time.Second)); !held[id] {
		t.Fatal("the lapsed holder's Started settled a request another attempt holds")
	}
	if err := s.Started(ctx, id, "c"); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.DueIntake(ctx, "e", later.Add(time.Hour), later.Add(2*time.Hour), 10); len(due) != 0 {
		t.Errorf("DueIntake(after Started) = %q; want nothing", due)
	}
	if held, _ := s.HoldIntake(ctx, map[string]string{id: "c"}, later.Add(time.Hour)); held[id] {
		t.Error("HoldIntake(a started request) = held; want not")
	}
	if again, _ := s.Accept(ctx, id, "f", []byte(`{}`), now, time.Hour); again {
		t.Error("a started request was accepted again")
	}
}

// TestStartedRequestKeepsOnlyItsRepeatCheck: once its conversation is
// under way, a request keeps in Redis only what recognises a repeat of
// it — its record's key, emptied, expiring when the record would have —
// and a repeat is still refused, on every kind of Redis the store runs
// on. A paused thread keeps nothing else of the request that began it.
func TestStartedRequestKeepsOnlyItsRepeatCheck(t *testing.T) {
	for name, client := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rdb := client(t)
			prefix := uniqueName("started")
			s := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			const id = "command:t1"
			now := time.Now()
			if first, err := s.Accept(ctx, id, "a", []byte(`{"text":"deploy","typed":"deploy"}`), now.Add(15*time.Second), time.Hour); err != nil || !first {
				t.Fatalf("Accept() = %v, %v; want true", first, err)
			}
			if err := s.Started(ctx, id, "a"); err != nil {
				t.Fatal(err)
			}
			keys, err := rdb.Keys(ctx, prefix+":*").Result()
			if err != nil {
				t.Fatal(err)
			}
			record := prefix + ":{intake}:req:" + id
			if len(keys) != 1 || keys[0] != record {
				t.Fatalf("keys after Started = %q; want only %s", keys, record)
			}
			if v, err := rdb.Get(ctx, record).Result(); err != nil || v != "" {
				t.Errorf("record after Started = %q, %v; want it empty", v, err)
			}
			if ttl, err := rdb.PTTL(ctx, record).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
				t.Errorf("record's expiry after Started = %v, %v; want within the hour it was accepted for", ttl, err)
			}
			if again, err := s.Accept(ctx, id, "b", []byte(`{"text":"deploy"}`), now, time.Hour); err != nil || again {
				t.Errorf("Accept(a repeat after Started) = %v, %v; want false", again, err)
			}
			if due, err := s.DueIntake(ctx, "c", now.Add(time.Hour), now.Add(2*time.Hour), 10); err != nil || len(due) != 0 {
				t.Errorf("DueIntake(after Started) = %q, %v; want nothing", due, err)
			}
		})
	}
}
