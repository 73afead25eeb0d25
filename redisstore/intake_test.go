package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
)

// TestIntake: a request is accepted once, held by the attempt that
// accepted it; only a hold that lapsed gives it to another attempt, and an
// attempt that lost it can neither write its record nor say it started.
// On every kind of Redis the store runs on.
func TestIntake(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestIntakeLetGo: a reply kept until its conversation's first save is
// let go by its attempt, and taken by the start's carrier (TakeIntake) or,
// once due, by DueIntake — never by both. A carrier that finds it still
// held marks it instead, and its holder goes on with it rather than
// letting go. On every kind of Redis the store runs on.
func TestIntakeLetGo(t *testing.T) {
	t.Parallel()
	for name, client := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			testIntakeLetGo(t, redisstore.New(client(t), redisstore.Options{Prefix: uniqueName("letgo")}))
		})
	}
}

func testIntakeLetGo(t *testing.T, s *redisstore.Store) {
	ctx := context.Background()
	now := time.Now()
	accept := func(id, token string) {
		t.Helper()
		if first, err := s.Accept(ctx, id, token, []byte(`{"text":"more"}`), now.Add(15*time.Second), time.Hour); err != nil || !first {
			t.Fatalf("Accept(%s) = %v, %v", id, first, err)
		}
	}
	kept := []byte(`{"text":"more","kept_until":1}`)

	// Let go, then taken by the carrier: not due for DueIntake.
	accept("event:1", "a")
	if let, goOn, err := s.LetGoIntake(ctx, "event:1", "b", kept, now.Add(15*time.Minute), now.Add(15*time.Second)); err != nil || let || goOn {
		t.Errorf("LetGoIntake(not the holder) = %v, %v, %v; want neither", let, goOn, err)
	}
	if let, goOn, err := s.LetGoIntake(ctx, "event:1", "a", kept, now.Add(15*time.Minute), now.Add(15*time.Second)); err != nil || !let || goOn {
		t.Fatalf("LetGoIntake(holder) = %v, %v, %v; want let", let, goOn, err)
	}
	if held, _ := s.HoldIntake(ctx, map[string]string{"event:1": "a"}, now.Add(time.Minute)); held["event:1"] {
		t.Error("the attempt that let go still renews its hold")
	}
	if due, _ := s.DueIntake(ctx, "x", now.Add(time.Minute), now.Add(2*time.Minute), 10); len(due) != 0 {
		t.Errorf("DueIntake(before the let-go time) = %q; want nothing", due)
	}
	if rec, err := s.TakeIntake(ctx, "event:1", "c", now.Add(15*time.Second)); err != nil || string(rec) != string(kept) {
		t.Fatalf("TakeIntake(let go) = %q, %v; want the record", rec, err)
	}
	if rec, _ := s.TakeIntake(ctx, "event:1", "d", now.Add(15*time.Second)); rec != nil {
		t.Errorf("TakeIntake(again) = %q; want nothing: one attempt at a time", rec)
	}
	if due, _ := s.DueIntake(ctx, "x", now.Add(16*time.Minute), now.Add(17*time.Minute), 10); len(due) != 1 {
		t.Errorf("DueIntake(after the carrier's hold lapsed) = %q; want the request", due)
	}

	// Taken by DueIntake once due: the carrier takes nothing.
	accept("event:2", "a")
	if let, _, err := s.LetGoIntake(ctx, "event:2", "a", kept, now.Add(time.Minute), now.Add(15*time.Second)); err != nil || !let {
		t.Fatalf("LetGoIntake() = %v, %v", let, err)
	}
	if due, err := s.DueIntake(ctx, "e", now.Add(2*time.Minute), now.Add(3*time.Minute), 10); err != nil || due["event:2"] == nil {
		t.Fatalf("DueIntake(let go, due) = %q, %v; want the request", due, err)
	}
	if rec, _ := s.TakeIntake(ctx, "event:2", "f", now.Add(3*time.Minute)); rec != nil {
		t.Errorf("TakeIntake(taken by DueIntake) = %q; want nothing", rec)
	}

	// Still held when the carrier comes: its holder goes on.
	accept("event:3", "a")
	if rec, err := s.TakeIntake(ctx, "event:3", "g", now.Add(15*time.Second)); err != nil || rec != nil {
		t.Fatalf("TakeIntake(held) = %q, %v; want nothing", rec, err)
	}
	if let, goOn, err := s.LetGoIntake(ctx, "event:3", "a", kept, now.Add(15*time.Minute), now.Add(15*time.Second)); err != nil || let || !goOn {
		t.Fatalf("LetGoIntake(asked for meanwhile) = %v, %v, %v; want go on", let, goOn, err)
	}
	if held, _ := s.HoldIntake(ctx, map[string]string{"event:3": "a"}, now.Add(time.Minute)); !held["event:3"] {
		t.Error("the holder told to go on no longer holds the request")
	}

	// Started: nothing to take.
	if err := s.Started(ctx, "event:3", "a"); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.TakeIntake(ctx, "event:3", "h", now.Add(15*time.Second)); rec != nil {
		t.Errorf("TakeIntake(started) = %q; want nothing", rec)
	}
}

// beforeTake runs its step once, just before the next script on an
// accepted request's record is sent — armed before DueIntake, its take:
// what another process does between DueIntake listing a request and
// taking it.
type beforeTake struct {
	step atomic.Pointer[func()]
}

func (h *beforeTake) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforeTake) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 3 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") &&
			strings.Contains(fmt.Sprint(args[3]), ":{intake}:req:") {
			if step := h.step.Swap(nil); step != nil {
				(*step)()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *beforeTake) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestIntakeDueTakeRaces: DueIntake lists the requests whose time has
// come, then takes each; what the holder or the start's carrier does in
// between is not overruled. A holder that renewed its hold, or let go of
// a kept reply (which the carrier then takes), keeps the request from
// DueIntake; so does a holder told to go on (its hold renewed, though it
// was about to lapse). Before, DueIntake's take wrote its token over
// theirs, and two attempts handed the same reply on: two turns, two
// answers. On every kind of Redis the store runs on.
func TestIntakeDueTakeRaces(t *testing.T) {
	t.Parallel()
	for name, client := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			rdb := client(t)
			hook := &beforeTake{}
			rdb.AddHook(hook)
			testIntakeDueTakeRaces(t, redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("duerace")}), hook)
		})
	}
}

func testIntakeDueTakeRaces(t *testing.T, s *redisstore.Store, hook *beforeTake) {
	ctx := context.Background()
	now := time.Now()
	kept := []byte(`{"text":"more","kept_until":1}`)
	accept := func(id string) {
		t.Helper()
		if first, err := s.Accept(ctx, id, "a", []byte(`{"text":"more"}`), now.Add(15*time.Second), time.Hour); err != nil || !first {
			t.Fatalf("Accept(%s) = %v, %v", id, first, err)
		}
	}
	between := func(step func()) { hook.step.Store(&step) }
	lapsed := now.Add(20 * time.Second) // the holder's hold lapsed

	// The holder lets go of a kept reply between the listing and the
	// take: the carrier takes it, DueIntake does not.
	accept("event:1")
	var let bool
	between(func() {
		var err error
		if let, _, err = s.LetGoIntake(ctx, "event:1", "a", kept, now.Add(15*time.Minute), lapsed); err != nil {
			t.Error(err)
		}
	})
	due, err := s.DueIntake(ctx, "b", lapsed, lapsed.Add(15*time.Second), 10)
	if err != nil || !let {
		t.Fatalf("DueIntake() = %q, %v, with the holder letting go meanwhile: let = %v", due, err, let)
	}
	if due["event:1"] != nil {
		t.Errorf("DueIntake took a request its holder let go of meanwhile, until minutes later")
	}
	if rec, err := s.TakeIntake(ctx, "event:1", "c", lapsed.Add(15*time.Second)); err != nil || string(rec) != string(kept) {
		t.Errorf("TakeIntake(let go) = %q, %v; want the record: the carrier carries the reply on", rec, err)
	}

	// The holder renews its hold between the listing and the take.
	accept("event:2")
	var held map[string]bool
	between(func() {
		var err error
		if held, err = s.HoldIntake(ctx, map[string]string{"event:2": "a"}, lapsed.Add(time.Minute)); err != nil {
			t.Error(err)
		}
	})
	due, err = s.DueIntake(ctx, "b", lapsed, lapsed.Add(15*time.Second), 10)
	if err != nil || !held["event:2"] {
		t.Fatalf("DueIntake() = %q, %v, with the holder renewing meanwhile: held = %v", due, err, held)
	}
	if due["event:2"] != nil {
		t.Errorf("DueIntake took a request whose holder renewed its hold meanwhile: two attempts hold it")
	}

	// The carrier asks for a reply still held; its holder, whose hold
	// was about to lapse, is told to go on: DueIntake leaves it alone.
	accept("event:3")
	if rec, err := s.TakeIntake(ctx, "event:3", "c", now.Add(15*time.Second)); err != nil || rec != nil {
		t.Fatalf("TakeIntake(held) = %q, %v; want nothing", rec, err)
	}
	if let, goOn, err := s.LetGoIntake(ctx, "event:3", "a", kept, now.Add(15*time.Minute), lapsed.Add(time.Minute)); err != nil || let || !goOn {
		t.Fatalf("LetGoIntake(asked for meanwhile) = %v, %v, %v; want go on", let, goOn, err)
	}
	if due, _ := s.DueIntake(ctx, "b", lapsed, lapsed.Add(15*time.Second), 10); due["event:3"] != nil {
		t.Errorf("DueIntake took a request whose holder was told to go on with it")
	}
	// Its hold lapses in turn: then DueIntake takes it, and the holder
	// has lost it.
	if due, _ := s.DueIntake(ctx, "b", lapsed.Add(2*time.Minute), lapsed.Add(3*time.Minute), 10); due["event:3"] == nil {
		t.Errorf("DueIntake did not take a request whose hold lapsed")
	}
	if held, _ := s.HoldIntake(ctx, map[string]string{"event:3": "a"}, lapsed.Add(3*time.Minute)); held["event:3"] {
		t.Errorf("the holder still holds a request DueIntake took")
	}
}
