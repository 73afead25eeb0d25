// Package runnertest holds the tests that any runner.Store must pass:
// claims, approvals, leases and the schedule (TestStore), the sessions
// that the service's one storage path takes (TestSessions), and the inbox
// (TestInbox). Every implementation runs the same suites from its own
// tests, against every kind of server it runs on:
//
//	func TestRunnerStoreContract(t *testing.T) {
//		runnertest.TestStore(t, func(t *testing.T) runnertest.Store {
//			return runner.NewMemoryStore(nil)
//		})
//		runnertest.TestSessions(t, func(t *testing.T) runnertest.Stores {
//			cps := graph.NewMemoryStore(graph.MemoryOptions{})
//			return runnertest.Stores{Store: runner.NewMemoryStore(nil).WithCheckpoints(cps), Checkpoints: cps}
//		})
//	}
//
// (Example shows it with the in-memory store.)
//
// The suite gives every thread a unique name, so several stores may share
// one backing server at once. Lease expiry is tested with real time
// (leases of tens of milliseconds), since a server keeps its own clock.
package runnertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/runner"
)

// Store is what the suite tests: claims, approvals, leases and the
// schedule (and, in TestSessions, the rest of runner.Store).
type Store interface {
	runner.Store
}

// TestStore runs the contract against the stores newStore returns, one
// per subtest.
func TestStore(t *testing.T, newStore func(t *testing.T) Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, s Store)
	}{
		{"ClaimOnce", testClaimOnce},
		{"ConcurrentClaims", testConcurrentClaims},
		{"ClaimsIsolated", testClaimsIsolated},
		{"LeaseExpires", testLeaseExpires},
		{"Schedule", testSchedule},
	}
	tests = append(tests, leaseTests...)
	run(t, newStore, append(tests, approvalTests...))
}

// leaseTests are the suite's tests of leases that need no clock.
var leaseTests = []struct {
	name string
	run  func(t *testing.T, s Store)
}{
	{"Lease", testLease},
	{"LeaseTokens", testLeaseTokens},
	{"ConcurrentLeases", testConcurrentLeases},
}

// approvalTests are the suite's tests of approvals (runner.Approvals).
var approvalTests = []struct {
	name string
	run  func(t *testing.T, s Store)
}{
	{"Quorum", testQuorum},
	{"QuorumAfterAClaim", testQuorumAfterAClaim},
	{"QuorumOfOne", testQuorumOfOne},
	{"BadApprovals", testBadApprovals},
	{"ConcurrentApprovals", testConcurrentApprovals},
	{"ApprovalsRaceARejection", testApprovalsRaceARejection},
}

// TestApprovals runs only the approvals' part of the contract, for a
// backing server whose keys do not expire by the clock (an embedded
// Redis), where the leases' part cannot pass.
func TestApprovals(t *testing.T, newStore func(t *testing.T) Store) {
	run(t, newStore, approvalTests)
}

// TestLeases runs the leases' part of the contract that needs no clock
// (expiry aside): which acquisition holds a lease, and that each has a
// token of its own. It runs on a backing server whose keys do not expire
// by the clock too.
func TestLeases(t *testing.T, newStore func(t *testing.T) Store) {
	run(t, newStore, leaseTests)
}

func run(t *testing.T, newStore func(t *testing.T) Store, tests []struct {
	name string
	run  func(t *testing.T, s Store)
}) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, newStore(t))
		})
	}
}

func thread(name string) string { return fmt.Sprintf("runnertest-%s-%d", name, rand.Int64()) }

func testClaimOnce(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("claim")
	if all, err := s.Claims(ctx, th); err != nil || len(all) != 0 {
		t.Fatalf("Claims(new thread) = %v, %v; want empty", all, err)
	}
	if v, won, err := s.Claim(ctx, th, "decision:0.0#0", []byte("bob")); err != nil || !won || string(v) != "bob" {
		t.Fatalf("Claim() = %q, %v, %v; want bob, won", v, won, err)
	}
	if v, won, err := s.Claim(ctx, th, "decision:0.0#0", []byte("carol")); err != nil || won || string(v) != "bob" {
		t.Errorf("Claim(again) = %q, %v, %v; want bob's claim, lost", v, won, err)
	}
	if _, won, _ := s.Claim(ctx, th, "decision:0.0#1", []byte("carol")); !won {
		t.Error("Claim(another key) lost")
	}
	all, err := s.Claims(ctx, th)
	if err != nil || len(all) != 2 || string(all["decision:0.0#0"]) != "bob" || string(all["decision:0.0#1"]) != "carol" {
		t.Errorf("Claims() = %q, %v; want both", all, err)
	}
}

func testConcurrentClaims(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("race")
	const n = 16
	var wg sync.WaitGroup
	won := make([]bool, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, w, err := s.Claim(ctx, th, "k", []byte{byte('a' + i)})
			if err != nil {
				t.Error(err)
			}
			won[i] = w
		}()
	}
	wg.Wait()
	if c := slices.Index(won, true); c < 0 || slices.Index(won[c+1:], true) >= 0 {
		t.Errorf("winners = %v, want exactly one", won)
	}
}

func testClaimsIsolated(t *testing.T, s Store) {
	ctx, a, b := context.Background(), thread("a"), thread("b")
	_, _, _ = s.Claim(ctx, a, "k", []byte("1"))
	if _, won, _ := s.Claim(ctx, b, "k", []byte("2")); !won {
		t.Error("a claim in one thread blocked the same key in another")
	}
}

func testLease(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("lease")
	p1 := mustAcquire(t, s, th, "p1", time.Minute)
	if !strings.HasPrefix(p1, "p1") {
		t.Errorf("AcquireLease(p1) token = %q, want it to begin with its owner", p1)
	}
	if tok, _ := s.AcquireLease(ctx, th, "p2", time.Minute); tok != "" {
		t.Error("AcquireLease(p2) took a held lease")
	}
	if tok, _ := s.AcquireLease(ctx, th, "p1", time.Minute); tok != "" {
		t.Error("AcquireLease(p1) acquired its own held lease again")
	}
	for _, forged := range []string{"p1", "p2", p1 + "x", p1[:len(p1)-1]} {
		if ok, _ := s.RenewLease(ctx, th, forged, time.Minute); ok {
			t.Errorf("RenewLease(%q) renewed the lease of token %q", forged, p1)
		}
		if err := s.ReleaseLease(ctx, th, forged); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.RenewLease(ctx, th, p1, time.Minute); err != nil || !ok {
		t.Errorf("RenewLease(p1's token) = %v, %v", ok, err)
	}
	if tok, _ := s.AcquireLease(ctx, th, "p2", time.Minute); tok != "" {
		t.Error("ReleaseLease(another token) released p1's lease")
	}
	if err := s.ReleaseLease(ctx, th, p1); err != nil {
		t.Fatal(err)
	}
	p2 := mustAcquire(t, s, th, "p2", time.Minute)
	if ok, _ := s.RenewLease(ctx, th, p1, time.Minute); ok {
		t.Error("RenewLease(p1's token) renewed a lease p2 now holds")
	}
	if ok, _ := s.RenewLease(ctx, th, p2, time.Minute); !ok {
		t.Error("RenewLease(p2's token) failed")
	}
}

// testLeaseTokens: every acquisition has a token of its own, so a token
// of an earlier acquisition by the same owner — a run of a process that
// stalled past its lease — renews, releases and saves nothing once the
// same owner has acquired the lease again.
func testLeaseTokens(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("tokens")
	first := mustAcquire(t, s, th, "p1", time.Minute)
	if err := s.ReleaseLease(ctx, th, first); err != nil {
		t.Fatal(err)
	}
	later := mustAcquire(t, s, th, "p1", time.Minute)
	if later == first {
		t.Fatalf("two acquisitions by p1 got the same token %q", first)
	}
	if ok, err := s.RenewLease(ctx, th, first, time.Minute); err != nil || ok {
		t.Errorf("RenewLease(earlier token) = %v, %v; want false", ok, err)
	}
	if err := s.ReleaseLease(ctx, th, first); err != nil {
		t.Fatal(err)
	}
	if tok, _ := s.AcquireLease(ctx, th, "p2", time.Minute); tok != "" {
		t.Error("ReleaseLease(earlier token) released the later acquisition's lease")
	}
	if ok, err := s.RenewLease(ctx, th, later, time.Minute); err != nil || !ok {
		t.Errorf("RenewLease(later token) = %v, %v; want true", ok, err)
	}
	if gs, ok := s.(graph.Store); ok {
		cp := &graph.Checkpoint{Version: graph.SchemaVersion, Thread: th, Seq: 1, ID: "cp-1", Status: graph.Running,
			Step: 1, Next: []string{"model"}, State: json.RawMessage(`{}`), Created: time.Now().UTC()}
		if err := gs.Save(graph.WithFence(ctx, first), cp); !errors.Is(err, graph.ErrConflict) {
			t.Errorf("Save(fenced by the earlier token) = %v, want ErrConflict", err)
		}
		if _, err := gs.Load(ctx, th); !errors.Is(err, graph.ErrNoCheckpoint) {
			t.Errorf("Load after a fenced save = %v, want ErrNoCheckpoint: nothing written", err)
		}
		if err := gs.Save(graph.WithFence(ctx, later), cp); err != nil {
			t.Errorf("Save(fenced by the later token) = %v", err)
		}
	}
	if err := s.ReleaseLease(ctx, th, later); err != nil {
		t.Fatal(err)
	}
	sess := s
	// Sessions take the lease too, with tokens of their own.
	o1, err := sess.OpenThread(ctx, runner.Opening{Thread: th, Owner: "p1", TTL: time.Minute})
	if err != nil || !o1.Held || o1.Token == "" || o1.Token == first || o1.Token == later {
		t.Fatalf("OpenThread(p1) = %+v, %v; want held with a new token", o1, err)
	}
	if _, err := sess.CloseThread(ctx, runner.Closing{Thread: th, Token: o1.Token, Answered: -1}); err != nil {
		t.Fatal(err)
	}
	o2, err := sess.OpenThread(ctx, runner.Opening{Thread: th, Owner: "p1", TTL: time.Minute})
	if err != nil || !o2.Held || o2.Token == "" || o2.Token == o1.Token {
		t.Fatalf("OpenThread(p1) again = %+v, %v; want held with a new token", o2, err)
	}
	if _, err := sess.CloseThread(ctx, runner.Closing{Thread: th, Token: o1.Token, Answered: -1}); err != nil {
		t.Fatal(err)
	}
	if o, _ := sess.OpenThread(ctx, runner.Opening{Thread: th, Owner: "p2", TTL: time.Minute}); o.Held {
		t.Error("CloseThread(earlier token) released the later acquisition's lease")
	}
	if ok, _ := s.RenewLease(ctx, th, o1.Token, time.Minute); ok {
		t.Error("RenewLease(earlier session's token) renewed the later session's lease")
	}
	if _, err := sess.CloseThread(ctx, runner.Closing{Thread: th, Token: o2.Token, Answered: -1}); err != nil {
		t.Fatal(err)
	}
	c, err := sess.ClaimDecision(ctx, runner.DecisionClaim{Thread: th, Key: "decision:0.0#0", Value: []byte("{}"),
		LeaseOwner: "p1", LeaseTTL: time.Minute})
	if err != nil || !c.Leased || c.Token == "" || c.Token == o1.Token || c.Token == o2.Token {
		t.Fatalf("ClaimDecision(taking the lease for p1) = %+v, %v; want leased with a new token", c, err)
	}
	if ok, _ := s.RenewLease(ctx, th, o2.Token, time.Minute); ok {
		t.Error("RenewLease(earlier session's token) renewed the lease a claim took")
	}
	if ok, _ := s.RenewLease(ctx, th, c.Token, time.Minute); !ok {
		t.Error("RenewLease(the claim's token) failed")
	}
}

// mustAcquire acquires the thread's lease for owner and returns its token.
func mustAcquire(t *testing.T, s Store, th, owner string, ttl time.Duration) string {
	t.Helper()
	tok, err := s.AcquireLease(context.Background(), th, owner, ttl)
	if err != nil || tok == "" {
		t.Fatalf("AcquireLease(%s) = %q, %v; want a token", owner, tok, err)
	}
	return tok
}

// testLeaseExpires: a lease that lapsed is taken again, by its own owner
// too, and the lapsed acquisition's token renews nothing.
func testLeaseExpires(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("expiry")
	first := mustAcquire(t, s, th, "p1", 50*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	var later string
	for {
		if later, _ = s.AcquireLease(ctx, th, "p1", time.Minute); later != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a 50ms lease was still held after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if later == first {
		t.Fatalf("p1 acquired a lapsed lease again with its earlier token %q", first)
	}
	if ok, _ := s.RenewLease(ctx, th, first, time.Minute); ok {
		t.Error("RenewLease(p1's earlier token) renewed a lease that lapsed and p1 took again")
	}
	if ok, _ := s.RenewLease(ctx, th, later, time.Minute); !ok {
		t.Error("RenewLease(p1's later token) failed")
	}
}

func testConcurrentLeases(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("leases")
	const n = 16
	var wg sync.WaitGroup
	got := make([]bool, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, _ := s.AcquireLease(ctx, th, fmt.Sprintf("p%d", i), time.Minute)
			got[i] = tok != ""
		}()
	}
	wg.Wait()
	if c := slices.Index(got, true); c < 0 || slices.Index(got[c+1:], true) >= 0 {
		t.Errorf("holders = %v, want exactly one", got)
	}
}

func testSchedule(t *testing.T, s Store) {
	ctx := context.Background()
	a, b := thread("wake-a"), thread("wake-b")
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	if err := s.Wake(ctx, a, base.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.WakeBy(ctx, a, base.Add(20*time.Minute)); err != nil { // later: no change
		t.Fatal(err)
	}
	if err := s.WakeBy(ctx, b, base.Add(5*time.Minute)); err != nil { // new
		t.Fatal(err)
	}
	due, err := s.Due(ctx, base.Add(15*time.Minute), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(due, a) || !slices.Contains(due, b) || slices.Index(due, b) > slices.Index(due, a) {
		t.Errorf("Due() = %v; want %s then %s (earliest first)", due, b, a)
	}
	if err := s.WakeBy(ctx, a, base.Add(time.Minute)); err != nil { // earlier: moves
		t.Fatal(err)
	}
	if due, _ := s.Due(ctx, base.Add(2*time.Minute), 1000); !slices.Contains(due, a) || slices.Contains(due, b) {
		t.Errorf("after WakeBy(earlier): Due() = %v, want %s and not %s", due, a, b)
	}
	if err := s.Wake(ctx, a, base.Add(3*time.Hour)); err != nil { // Wake moves later too
		t.Fatal(err)
	}
	if err := s.Forget(ctx, b); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.Due(ctx, base.Add(2*time.Hour), 1000); slices.Contains(due, a) || slices.Contains(due, b) {
		t.Errorf("after Wake(later) and Forget: Due() = %v, want neither", due)
	}
	if err := s.SetWaiting(ctx, a, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWaiting(ctx, a, 0); err != nil {
		t.Fatal(err)
	}
}

// approval is an approval toward decision:0.0#0 in the set named set.
func approval(set, by string, required int) runner.Approval {
	return runner.Approval{Key: "decision:0.0#0", Set: set, By: by, Entry: []byte(`{"by":"` + by + `"}`),
		Required: required, Value: []byte(`{"kind":"approve","by":"` + by + `"}`)}
}

// Two approvals decide: the first is recorded, a second click of the same
// person changes nothing, the second person's claims the decision with
// both approvals, and later ones find it claimed. Approvals of other
// arguments (another set) count apart.
func testQuorum(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("quorum")
	got, err := s.Approve(ctx, th, approval("approvals:a", "U0BOB", 2))
	if err != nil || !got.Recorded || got.Won || got.Winner != nil || string(got.Approvals) != "U0BOB\t{\"by\":\"U0BOB\"}\n" {
		t.Fatalf("Approve(bob) = %+v, %v; want recorded, not decided", got, err)
	}
	got, err = s.Approve(ctx, th, approval("approvals:a", "U0BOB", 2))
	if err != nil || got.Recorded || got.Won || got.Winner != nil || string(got.Approvals) != "U0BOB\t{\"by\":\"U0BOB\"}\n" {
		t.Fatalf("Approve(bob again) = %+v, %v; want nothing recorded", got, err)
	}
	if all, _ := s.Claims(ctx, th); all["decision:0.0#0"] != nil {
		t.Fatalf("one approval of two claimed the decision: %q", all["decision:0.0#0"])
	}
	// Approvals of other arguments do not count toward these.
	if got, err := s.Approve(ctx, th, approval("approvals:b", "U0CAROL", 2)); err != nil || !got.Recorded || got.Won {
		t.Fatalf("Approve(carol, other set) = %+v, %v; want recorded, not decided", got, err)
	}
	want := "{\"kind\":\"approve\",\"by\":\"U0DAVE\"}\nU0BOB\t{\"by\":\"U0BOB\"}\nU0DAVE\t{\"by\":\"U0DAVE\"}\n"
	got, err = s.Approve(ctx, th, approval("approvals:a", "U0DAVE", 2))
	if err != nil || !got.Recorded || !got.Won || string(got.Winner) != want {
		t.Fatalf("Approve(dave) = %+v, %v; want the decision claimed as %q", got, err, want)
	}
	got, err = s.Approve(ctx, th, approval("approvals:a", "U0ERIN", 2))
	if err != nil || got.Recorded || got.Won || string(got.Winner) != want {
		t.Errorf("Approve(erin, after the decision) = %+v, %v; want nothing recorded, the claim", got, err)
	}
	if _, won, _ := s.Claim(ctx, th, "decision:0.0#0", []byte("reject")); won {
		t.Error("Claim(after the quorum) won")
	}
	all, err := s.Claims(ctx, th)
	if err != nil || string(all["decision:0.0#0"]) != want || !strings.HasPrefix(string(all["approvals:a"]), "U0BOB\t") {
		t.Errorf("Claims() = %q, %v; want the decision and the approvals", all, err)
	}
}

// A decision claimed first (a rejection) ends it: approvals record
// nothing.
func testQuorumAfterAClaim(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("quorum-claimed")
	if _, won, err := s.Claim(ctx, th, "decision:0.0#0", []byte("reject")); !won || err != nil {
		t.Fatalf("Claim() = %v, %v", won, err)
	}
	got, err := s.Approve(ctx, th, approval("approvals:a", "U0BOB", 2))
	if err != nil || got.Recorded || string(got.Winner) != "reject" || len(got.Approvals) != 0 {
		t.Errorf("Approve(after a rejection) = %+v, %v; want nothing recorded, the rejection", got, err)
	}
}

func testQuorumOfOne(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("quorum-one")
	got, err := s.Approve(ctx, th, approval("approvals:a", "U0BOB", 1))
	if err != nil || !got.Won || !strings.HasPrefix(string(got.Winner), `{"kind":"approve","by":"U0BOB"}`+"\n") {
		t.Errorf("Approve(required 1) = %+v, %v; want it decided", got, err)
	}
}

func testBadApprovals(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("quorum-bad")
	good := approval("approvals:a", "U0BOB", 2)
	bad := map[string]func(a *runner.Approval){
		"tab in by":        func(a *runner.Approval) { a.By = "U0\tBOB" },
		"newline in by":    func(a *runner.Approval) { a.By = "U0BOB\nU0MALLORY" },
		"newline in entry": func(a *runner.Approval) { a.Entry = []byte("{}\nU0MALLORY\t{}") },
		"no one":           func(a *runner.Approval) { a.By = "" },
		"no set":           func(a *runner.Approval) { a.Set = "" },
		"set is the key":   func(a *runner.Approval) { a.Set = a.Key },
		"none required":    func(a *runner.Approval) { a.Required = 0 },
	}
	for name, spoil := range bad {
		a := good
		spoil(&a)
		if got, err := s.Approve(ctx, th, a); !errors.Is(err, runner.ErrBadApproval) {
			t.Errorf("Approve(%s) = %+v, %v; want ErrBadApproval", name, got, err)
		}
	}
	if all, _ := s.Claims(ctx, th); len(all) != 0 {
		t.Errorf("refused approvals wrote %q", all)
	}
}

// Sixteen clicks of four people, three approvals required: three are
// recorded, one of them decides, with three distinct approvers.
func testConcurrentApprovals(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("quorum-race")
	const n = 16
	var wg sync.WaitGroup
	results := make([]runner.Approved, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.Approve(ctx, th, approval("approvals:a", fmt.Sprintf("U0P%d", i%4), 3))
			if err != nil {
				t.Error(err)
			}
			results[i] = got
		}()
	}
	wg.Wait()
	recorded, won := 0, 0
	var winner []byte
	for _, r := range results {
		if r.Recorded {
			recorded++
		}
		if r.Won {
			won++
			winner = r.Winner
		}
	}
	if recorded != 3 || won != 1 {
		t.Fatalf("%d approvals recorded, %d decided; want 3 and 1", recorded, won)
	}
	lines := strings.Split(strings.TrimSuffix(string(winner), "\n"), "\n")[1:]
	people := map[string]bool{}
	for _, l := range lines {
		by, _, _ := strings.Cut(l, "\t")
		people[by] = true
	}
	if len(lines) != 3 || len(people) != 3 {
		t.Errorf("the decision holds approvals %q; want three of three people", lines)
	}
}

// Approvals race a rejection: exactly one of them decides.
func testApprovalsRaceARejection(t *testing.T, s Store) {
	ctx := context.Background()
	for range 20 {
		th := thread("quorum-reject")
		var wg sync.WaitGroup
		var won [2]bool
		var rejected bool
		wg.Add(3)
		for i, who := range []string{"U0BOB", "U0CAROL"} {
			go func() {
				defer wg.Done()
				got, _ := s.Approve(ctx, th, approval("approvals:a", who, 2))
				won[i] = got.Won
			}()
		}
		go func() {
			defer wg.Done()
			_, rejected, _ = s.Claim(ctx, th, "decision:0.0#0", []byte("reject"))
		}()
		wg.Wait()
		approved := won[0] || won[1]
		if won[0] && won[1] {
			t.Fatal("both approvals decided")
		}
		all, _ := s.Claims(ctx, th)
		decided := string(all["decision:0.0#0"])
		if rejected == approved || (rejected && decided != "reject") || (approved && !strings.HasPrefix(decided, `{"kind":"approve"`)) {
			t.Fatalf("rejected %v, approved %v, claim %q; want exactly one to decide", rejected, approved, decided)
		}
	}
}
