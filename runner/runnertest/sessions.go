package runnertest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/runner"
)

// Stores is what the sessions' part of the contract runs against: the
// runner's store, and the graph's store whose head checkpoint it reads
// (nil if it reads none: then heads are unknown and stale claims are not
// refused, and the suite skips those checks).
type Stores struct {
	Store       runner.Store
	Checkpoints graph.Store
}

// TestSessions runs the sessions' part of the contract (runner.Sessions:
// the one path the service takes) against the stores newStores returns,
// one pair per subtest. It needs no clock: leases are never waited out,
// so it runs on a backing server whose keys do not expire by the clock
// too.
func TestSessions(t *testing.T, newStores func(t *testing.T) Stores) {
	tests := []struct {
		name string
		run  func(t *testing.T, s Stores)
	}{
		{"OpenAndClose", testOpenAndClose},
		{"ConcurrentOpens", testConcurrentOpens},
		{"CloseWritesTheSchedule", testCloseSchedule},
		{"CloseWritesTheInbox", testCloseInbox},
		{"ClaimDecision", testClaimDecision},
		{"ClaimDecisionStale", testClaimDecisionStale},
		{"ClaimApproval", testClaimApproval},
		{"ClaimValuesReadsOnlyKeys", testClaimValues},
		{"DeliveriesRecordedWithoutTheLease", testRecordDeliveries},
		{"DeliveriesOfSeveralThreadsRecordedTogether", testRecordDeliveriesBatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, newStores(t))
		})
	}
}

// saveHead saves a checkpoint with id as th's head, if s has
// checkpoints, and reports whether it did.
func saveHead(t *testing.T, s Stores, th, id string) bool {
	t.Helper()
	if s.Checkpoints == nil {
		return false
	}
	cp := &graph.Checkpoint{Version: graph.SchemaVersion, Thread: th, ID: id, Seq: 1, Status: graph.Running,
		State: json.RawMessage(`{}`), Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := s.Checkpoints.Save(context.Background(), cp); err != nil {
		t.Fatalf("Save(%s) = %v", id, err)
	}
	return true
}

func testOpenAndClose(t *testing.T, s Stores) {
	ctx, th := context.Background(), thread("open")
	st := s.Store
	heads := saveHead(t, s, th, "cp-1")
	if _, _, err := st.Claim(ctx, th, "decision:x#0", []byte("bob")); err != nil {
		t.Fatal(err)
	}
	a, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-a", TTL: time.Minute,
		Keys: []string{"decision:x#0", "answered"}})
	if err != nil || !a.Held || !strings.HasPrefix(a.Token, "replica-a:") {
		t.Fatalf("OpenThread(free) = %+v, %v; want held with a token of replica-a's", a, err)
	}
	if heads && a.Head != "cp-1" {
		t.Errorf("OpenThread().Head = %q, want cp-1", a.Head)
	}
	if len(a.Claims) != 1 || string(a.Claims["decision:x#0"]) != "bob" {
		t.Errorf("OpenThread().Claims = %q, want only decision:x#0 (answered is unset)", a.Claims)
	}
	if b, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-b", TTL: time.Minute}); err != nil || b.Held || b.Token != "" {
		t.Fatalf("OpenThread(held) = %+v, %v; want not held, no token", b, err)
	}
	// A delivery recorded before (a card's ts) is kept: records are set
	// once.
	if _, _, err := st.Claim(ctx, th, "card:y#0", []byte("ts-1")); err != nil {
		t.Fatal(err)
	}
	got, err := st.CloseThread(ctx, runner.Closing{Thread: th, Token: a.Token, Record: []string{"card:x#0", "card:y#0"},
		Answered: 3, Keys: []string{"decision:x#0", "card:x#0", "card:y#0", "answered", "nope"}})
	if err != nil {
		t.Fatalf("CloseThread = %v", err)
	}
	want := map[string]string{"decision:x#0": "bob", "card:x#0": "1", "card:y#0": "ts-1", "answered": "3"}
	if !sameClaims(got, want) {
		t.Errorf("CloseThread() = %q, want %q", got, want)
	}
	// The lease is free: another replica takes it, with a token of its own.
	b, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-b", TTL: time.Minute})
	if err != nil || !b.Held || b.Token == a.Token {
		t.Fatalf("OpenThread(after the close) = %+v, %v; want held with a new token", b, err)
	}
	// A late close of the earlier acquisition lets go of nothing, and the
	// answered count only grows.
	if _, err := st.CloseThread(ctx, runner.Closing{Thread: th, Token: a.Token, Answered: 2}); err != nil {
		t.Fatalf("CloseThread(stale token) = %v", err)
	}
	if ok, err := st.RenewLease(ctx, th, b.Token, time.Minute); err != nil || !ok {
		t.Errorf("RenewLease(B) after A's late close = %v, %v; want B to hold", ok, err)
	}
	if got, _ := st.ClaimValues(ctx, th, []string{"answered"}); string(got["answered"]) != "3" {
		t.Errorf("answered after a close with a lower count = %q, want 3", got["answered"])
	}
}

func testConcurrentOpens(t *testing.T, s Stores) {
	ctx, th := context.Background(), thread("opens")
	const n = 8
	var mu sync.Mutex
	var tokens []string
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := s.Store.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-" + string(rune('a'+i)), TTL: time.Minute})
			if err != nil {
				t.Error(err)
				return
			}
			if o.Held {
				mu.Lock()
				tokens = append(tokens, o.Token)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(tokens) != 1 {
		t.Errorf("%d concurrent OpenThread held the lease (%q), want exactly 1", len(tokens), tokens)
	}
}

// testRecordDeliveries: deliveries shown after a session ended are
// recorded without the lease — on their own, with a thread's opening or
// with a claim — set once, the answered count only growing; the wake-up
// moves to the planned one only if it is still the one the session set.
func testRecordDeliveries(t *testing.T, s Stores) {
	ctx, th := context.Background(), thread("record")
	st := s.Store
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond)
	a, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-a", TTL: time.Minute})
	if err != nil || !a.Held {
		t.Fatalf("OpenThread = %+v, %v", a, err)
	}
	set := base.Add(time.Minute)
	if _, err := st.CloseThread(ctx, runner.Closing{Thread: th, Token: a.Token, Answered: -1, Schedule: true, Wake: set}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Claim(ctx, th, "card:y#0", []byte("ts-1")); err != nil {
		t.Fatal(err)
	}
	errs := st.RecordDeliveries(ctx, []runner.Deliveries{{Thread: th, Record: []string{"card:x#0", "card:y#0"}, Answered: 4,
		Move: true, WakeSet: set, Wake: base.Add(10 * time.Hour)}})
	if errs != nil {
		t.Fatalf("RecordDeliveries = %v", errs)
	}
	got, _ := st.ClaimValues(ctx, th, []string{"card:x#0", "card:y#0", "answered"})
	if want := map[string]string{"card:x#0": "1", "card:y#0": "ts-1", "answered": "4"}; !sameClaims(got, want) {
		t.Errorf("claims after RecordDeliveries = %q, want %q", got, want)
	}
	if due, _ := st.Due(ctx, base.Add(5*time.Hour), 1000); slices.Contains(due, th) {
		t.Errorf("Due() after the wake-up moved = %v, want not %s before the planned one", due, th)
	}
	if due, _ := st.Due(ctx, base.Add(11*time.Hour), 1000); !slices.Contains(due, th) {
		t.Errorf("Due() at the planned wake-up = %v, want %s", due, th)
	}
	// A wake-up set since by a later step stays; the count only grows.
	if err := st.Wake(ctx, th, base.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if errs := st.RecordDeliveries(ctx, []runner.Deliveries{{Thread: th, Answered: 2, Move: true, WakeSet: set}}); errs != nil {
		t.Fatal(errs)
	}
	if due, _ := st.Due(ctx, base.Add(3*time.Hour), 1000); !slices.Contains(due, th) {
		t.Errorf("Due() after a stale move = %v, want %s: a later step's wake-up wins", due, th)
	}
	// With the opening of the next step, held or not, and with a claim.
	b, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-b", TTL: time.Minute,
		Record: []string{"card:z#0"}, Answered: 6, Keys: []string{"card:z#0", "answered"}})
	if err != nil || !b.Held {
		t.Fatalf("OpenThread = %+v, %v", b, err)
	}
	if want := map[string]string{"card:z#0": "1", "answered": "6"}; !sameClaims(b.Claims, want) {
		t.Errorf("OpenThread(Record).Claims = %q, want %q", b.Claims, want)
	}
	if _, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-c", TTL: time.Minute, Record: []string{"card:w#0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimDecision(ctx, runner.DecisionClaim{Thread: th, Key: "decision:v#0", Value: []byte("bob"),
		Record: []string{"card:v#0"}, Answered: 7}); err != nil {
		t.Fatal(err)
	}
	got, _ = st.ClaimValues(ctx, th, []string{"card:w#0", "card:v#0", "answered", "decision:v#0"})
	if want := map[string]string{"card:w#0": "1", "card:v#0": "1", "answered": "7", "decision:v#0": "bob"}; !sameClaims(got, want) {
		t.Errorf("claims after an opening and a claim that carried records = %q, want %q", got, want)
	}
}

// testRecordDeliveriesBatch: the deliveries of several threads are
// recorded in one call, each thread's as if on its own — its records,
// its count, its wake-up moved only if it is still the one its session
// set — and a thread that fails (it has no name) loses no other's.
func testRecordDeliveriesBatch(t *testing.T, s Stores) {
	ctx, st := context.Background(), s.Store
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond)
	set := base.Add(time.Minute)
	a, b, c := thread("batch-a"), thread("batch-b"), thread("batch-c")
	for _, th := range []string{a, b, c} {
		o, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-a", TTL: time.Minute})
		if err != nil || !o.Held {
			t.Fatalf("OpenThread(%s) = %+v, %v", th, o, err)
		}
		if _, err := st.CloseThread(ctx, runner.Closing{Thread: th, Token: o.Token, Answered: -1, Schedule: true, Wake: set}); err != nil {
			t.Fatal(err)
		}
	}
	// c's next step has set a wake-up of its own since.
	if err := st.Wake(ctx, c, base.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	errs := st.RecordDeliveries(ctx, []runner.Deliveries{
		{Thread: a, Record: []string{"card:x#0"}, Answered: 2, Move: true, WakeSet: set, Wake: base.Add(10 * time.Hour)},
		{Thread: "", Record: []string{"card:x#0"}, Answered: 2},
		{Thread: b, Record: []string{"card:y#0", "card:z#0"}, Move: true, WakeSet: set},
		{Thread: c, Answered: 5, Move: true, WakeSet: set, Wake: base.Add(10 * time.Hour)},
	})
	if len(errs) != 4 || errs[1] == nil || errs[0] != nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("RecordDeliveries(a, no thread, b, c) = %v; want only the second to fail", errs)
	}
	for th, want := range map[string]map[string]string{
		a: {"card:x#0": "1", "answered": "2"},
		b: {"card:y#0": "1", "card:z#0": "1"},
		c: {"answered": "5"},
	} {
		got, err := st.ClaimValues(ctx, th, []string{"card:x#0", "card:y#0", "card:z#0", "answered"})
		if err != nil || !sameClaims(got, want) {
			t.Errorf("claims of %s after the batch = %q, %v; want %q", th, got, err, want)
		}
	}
	due, err := st.Due(ctx, base.Add(2*time.Minute), 1000)
	if err != nil || slices.Contains(due, a) || slices.Contains(due, b) || !slices.Contains(due, c) {
		t.Errorf("Due() after the batch = %v, %v; want c (a later step's wake-up wins), not a (moved) nor b (none left)", due, err)
	}
	due, err = st.Due(ctx, base.Add(11*time.Hour), 1000)
	if err != nil || !slices.Contains(due, a) || slices.Contains(due, b) {
		t.Errorf("Due() at a's planned wake-up = %v, %v; want a, not b", due, err)
	}
	if errs := st.RecordDeliveries(ctx, []runner.Deliveries{{Thread: a, Answered: 3}, {Thread: b, Answered: 3}}); errs != nil {
		t.Errorf("RecordDeliveries(a, b) = %v, want nil when every thread's are recorded", errs)
	}
}

func testCloseSchedule(t *testing.T, s Stores) {
	ctx, th := context.Background(), thread("close-wake")
	st := s.Store
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond)
	a, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-a", TTL: time.Minute, WakeIfHeld: base.Add(time.Hour)})
	if err != nil || !a.Held {
		t.Fatalf("OpenThread = %+v, %v", a, err)
	}
	if due, _ := st.Due(ctx, base.Add(2*time.Hour), 1000); !slices.Contains(due, th) {
		t.Errorf("Due() after OpenThread(WakeIfHeld) = %v, want %s", due, th)
	}
	// Held elsewhere: the thread is woken once that holder's lease would
	// have lapsed, no later.
	if b, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-b", TTL: time.Minute, WakeIfBusy: base.Add(30 * time.Minute)}); err != nil || b.Held {
		t.Fatalf("OpenThread(held) = %+v, %v", b, err)
	}
	if due, _ := st.Due(ctx, base.Add(45*time.Minute), 1000); !slices.Contains(due, th) {
		t.Errorf("Due() after OpenThread(WakeIfBusy earlier) = %v, want %s", due, th)
	}
	if _, err := st.CloseThread(ctx, runner.Closing{Thread: th, Token: a.Token, Answered: -1, Schedule: true,
		Wake: base.Add(10 * time.Hour), Waiting: 1}); err != nil {
		t.Fatal(err)
	}
	if due, _ := st.Due(ctx, base.Add(5*time.Hour), 1000); slices.Contains(due, th) {
		t.Errorf("Due() after CloseThread(Wake later) = %v, want not %s: the holder sets it", due, th)
	}
	if due, _ := st.Due(ctx, base.Add(11*time.Hour), 1000); !slices.Contains(due, th) {
		t.Errorf("Due() after CloseThread(Wake) = %v, want %s", due, th)
	}
	// A close by a token that no longer holds leaves the schedule alone.
	c, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-c", TTL: time.Minute})
	if err != nil || !c.Held {
		t.Fatalf("OpenThread = %+v, %v", c, err)
	}
	if _, err := st.CloseThread(ctx, runner.Closing{Thread: th, Token: a.Token, Answered: -1, Schedule: true}); err != nil {
		t.Fatal(err)
	}
	if due, _ := st.Due(ctx, base.Add(11*time.Hour), 1000); !slices.Contains(due, th) {
		t.Errorf("Due() after a stale close that forgets = %v, want %s still", due, th)
	}
	if _, err := st.CloseThread(ctx, runner.Closing{Thread: th, Token: c.Token, Answered: -1, Schedule: true}); err != nil {
		t.Fatal(err)
	}
	if due, _ := st.Due(ctx, base.Add(100*time.Hour), 1000); slices.Contains(due, th) {
		t.Errorf("Due() after the holder's close that forgets = %v, want not %s", due, th)
	}
}

func testCloseInbox(t *testing.T, s Stores) {
	ctx, th := context.Background(), thread("close-inbox")
	st := s.Store
	e := entry(th, "0.0", 1)
	for i, waiting := range [][]runner.InboxEntry{{e}, nil} {
		o, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-a", TTL: time.Minute})
		if err != nil || !o.Held {
			t.Fatalf("OpenThread = %+v, %v", o, err)
		}
		u := &runner.InboxUpdate{Thread: th, Waiting: waiting}
		if _, err := st.CloseThread(ctx, runner.Closing{Thread: th, Token: o.Token, Answered: -1, Inbox: u}); err != nil {
			t.Fatalf("CloseThread(Inbox) = %v", err)
		}
		all, err := st.InboxEntries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		has := slices.ContainsFunc(all, func(x runner.InboxEntry) bool { return x.Thread == th && x.Call == e.Call })
		if has != (waiting != nil) {
			t.Errorf("close %d: InboxEntries() holds the call: %v, want %v", i, has, waiting != nil)
		}
		if i == 1 && (len(u.Replaced) != 1 || u.Replaced[0].Call != e.Call) {
			t.Errorf("close %d: Replaced = %+v, want the entry the first close wrote", i, u.Replaced)
		}
	}
}

func testClaimDecision(t *testing.T, s Stores) {
	ctx, th := context.Background(), thread("claim-decision")
	st := s.Store
	heads := saveHead(t, s, th, "cp-1")
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond)
	expect := ""
	if heads {
		expect = "cp-1"
	}
	got, err := st.ClaimDecision(ctx, runner.DecisionClaim{Thread: th, Key: "decision:x#0", Value: []byte("bob"),
		ExpectHead: expect, WakeBy: base, LeaseOwner: "replica-a", LeaseTTL: time.Minute, Keys: []string{"decision:x#0", "answered"}})
	if err != nil || !got.Won || string(got.Winner) != "bob" || !got.Leased || !strings.HasPrefix(got.Token, "replica-a:") {
		t.Fatalf("ClaimDecision(free) = %+v, %v; want won, leased with a token of replica-a's", got, err)
	}
	if heads && got.Head != "cp-1" {
		t.Errorf("ClaimDecision().Head = %q, want cp-1", got.Head)
	}
	if len(got.Claims) != 1 || string(got.Claims["decision:x#0"]) != "bob" {
		t.Errorf("ClaimDecision().Claims = %q, want the claim just made", got.Claims)
	}
	if due, _ := st.Due(ctx, base, 1000); !slices.Contains(due, th) {
		t.Errorf("Due() after ClaimDecision(WakeBy) = %v, want %s", due, th)
	}
	lost, err := st.ClaimDecision(ctx, runner.DecisionClaim{Thread: th, Key: "decision:x#0", Value: []byte("carol"),
		LeaseOwner: "replica-b", LeaseTTL: time.Minute})
	if err != nil || lost.Won || string(lost.Winner) != "bob" || lost.Leased {
		t.Errorf("ClaimDecision(taken) = %+v, %v; want lost to bob, no lease", lost, err)
	}
	other, err := st.ClaimDecision(ctx, runner.DecisionClaim{Thread: th, Key: "decision:y#0", Value: []byte("carol"),
		LeaseOwner: "replica-b", LeaseTTL: time.Minute})
	if err != nil || !other.Won || other.Leased || other.Token != "" {
		t.Errorf("ClaimDecision(lease held) = %+v, %v; want won, no lease", other, err)
	}
	if ok, err := st.RenewLease(ctx, th, got.Token, time.Minute); err != nil || !ok {
		t.Errorf("RenewLease(the claim's token) = %v, %v; want held", ok, err)
	}
}

func testClaimDecisionStale(t *testing.T, s Stores) {
	ctx, th := context.Background(), thread("claim-stale")
	if !saveHead(t, s, th, "cp-1") {
		t.Skip("the store reads no heads")
	}
	st := s.Store
	_, err := st.ClaimDecision(ctx, runner.DecisionClaim{Thread: th, Key: "decision:x#0", Value: []byte("bob"),
		ExpectHead: "cp-0", LeaseOwner: "replica-a", LeaseTTL: time.Minute})
	if !errors.Is(err, runner.ErrStale) {
		t.Fatalf("ClaimDecision(another head) = %v, want ErrStale", err)
	}
	_, err = st.ClaimApproval(ctx, runner.ApprovalClaim{Thread: th, Approval: approval("approvals:x", "U1", 2), ExpectHead: "cp-0"})
	if !errors.Is(err, runner.ErrStale) {
		t.Fatalf("ClaimApproval(another head) = %v, want ErrStale", err)
	}
	if got, err := st.ClaimValues(ctx, th, []string{"decision:x#0", "decision:0.0#0", "approvals:x"}); err != nil || len(got) != 0 {
		t.Errorf("claims after stale claims = %q, %v; want none written", got, err)
	}
	if o, err := st.OpenThread(ctx, runner.Opening{Thread: th, Owner: "replica-b", TTL: time.Minute}); err != nil || !o.Held {
		t.Errorf("OpenThread after a stale claim = %+v, %v; want the lease free", o, err)
	}
}

func testClaimApproval(t *testing.T, s Stores) {
	ctx, th := context.Background(), thread("claim-approval")
	st := s.Store
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond)
	first, err := st.ClaimApproval(ctx, runner.ApprovalClaim{Thread: th, Approval: approval("approvals:x", "U1", 2),
		WakeBy: base, LeaseOwner: "replica-a", LeaseTTL: time.Minute, Keys: []string{"approvals:x"}})
	if err != nil || !first.Recorded || first.Won || !first.Leased || first.Token == "" {
		t.Fatalf("ClaimApproval(first of 2) = %+v, %v; want recorded, not won, leased", first, err)
	}
	if !strings.HasPrefix(string(first.Claims["approvals:x"]), "U1\t") {
		t.Errorf("ClaimApproval().Claims = %q, want the approvals so far", first.Claims)
	}
	if due, _ := st.Due(ctx, base, 1000); !slices.Contains(due, th) {
		t.Errorf("Due() after ClaimApproval(WakeBy) = %v, want %s", due, th)
	}
	second, err := st.ClaimApproval(ctx, runner.ApprovalClaim{Thread: th, Approval: approval("approvals:x", "U2", 2),
		LeaseOwner: "replica-b", LeaseTTL: time.Minute})
	if err != nil || !second.Won || second.Leased {
		t.Fatalf("ClaimApproval(second of 2, lease held) = %+v, %v; want won, not leased", second, err)
	}
	if got, _ := st.ClaimValues(ctx, th, []string{"decision:0.0#0"}); !strings.HasPrefix(string(got["decision:0.0#0"]), `{"kind":"approve"`) {
		t.Errorf("the decision after the quorum = %q, want it claimed", got["decision:0.0#0"])
	}
}

func testClaimValues(t *testing.T, s Stores) {
	ctx, th := context.Background(), thread("values")
	st := s.Store
	for i := range 50 {
		if _, _, err := st.Claim(ctx, th, "old:"+string(rune('A'+i)), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.Claim(ctx, th, "decision:x#3", []byte("bob")); err != nil {
		t.Fatal(err)
	}
	got, err := st.ClaimValues(ctx, th, []string{"decision:x#3", "decision:x#4"})
	if want := map[string]string{"decision:x#3": "bob"}; err != nil || !sameClaims(got, want) {
		t.Errorf("ClaimValues() = %q, %v; want %q", got, err, want)
	}
	if got, err := st.ClaimValues(ctx, th, nil); err != nil || len(got) != 0 {
		t.Errorf("ClaimValues(no keys) = %q, %v; want none", got, err)
	}
}

func sameClaims(got map[string][]byte, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || string(g) != v {
			return false
		}
	}
	return true
}
