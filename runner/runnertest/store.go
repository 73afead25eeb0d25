// Package runnertest holds the tests that any runner.Store (claims and
// leases) and runner.Schedule must pass. Every implementation runs the
// same suite from its own tests:
//
//	func TestRunnerStoreContract(t *testing.T) {
//		runnertest.TestStore(t, func(t *testing.T, now func() time.Time) runnertest.Store {
//			return runner.NewMemoryStore(now)
//		})
//	}
//
// The suite gives every thread a unique name, so several stores may share
// one backing server at once. Lease expiry is tested with real time
// (leases of tens of milliseconds), since a server keeps its own clock.
package runnertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/runner"
)

// Store is what the suite tests: claims, leases and the schedule.
type Store interface {
	runner.Store
	runner.Schedule
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
		{"Lease", testLease},
		{"LeaseExpires", testLeaseExpires},
		{"ConcurrentLeases", testConcurrentLeases},
		{"Schedule", testSchedule},
	}
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
	if ok, err := s.AcquireLease(ctx, th, "p1", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease(p1) = %v, %v", ok, err)
	}
	if ok, _ := s.AcquireLease(ctx, th, "p2", time.Minute); ok {
		t.Error("AcquireLease(p2) took a held lease")
	}
	if ok, _ := s.AcquireLease(ctx, th, "p1", time.Minute); ok {
		t.Error("AcquireLease(p1) acquired its own held lease again")
	}
	if ok, _ := s.RenewLease(ctx, th, "p2", time.Minute); ok {
		t.Error("RenewLease(p2) renewed p1's lease")
	}
	if ok, err := s.RenewLease(ctx, th, "p1", time.Minute); err != nil || !ok {
		t.Errorf("RenewLease(p1) = %v, %v", ok, err)
	}
	if err := s.ReleaseLease(ctx, th, "p2"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.AcquireLease(ctx, th, "p2", time.Minute); ok {
		t.Error("ReleaseLease(p2) released p1's lease")
	}
	if err := s.ReleaseLease(ctx, th, "p1"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.AcquireLease(ctx, th, "p2", time.Minute); !ok {
		t.Error("AcquireLease(p2) after p1 released it failed")
	}
	if ok, _ := s.RenewLease(ctx, th, "p1", time.Minute); ok {
		t.Error("RenewLease(p1) renewed a lease p2 now holds")
	}
}

func testLeaseExpires(t *testing.T, s Store) {
	ctx, th := context.Background(), thread("expiry")
	if ok, _ := s.AcquireLease(ctx, th, "p1", 50*time.Millisecond); !ok {
		t.Fatal("AcquireLease(p1) failed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ok, _ := s.AcquireLease(ctx, th, "p2", time.Minute); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a 50ms lease was still held after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok, _ := s.RenewLease(ctx, th, "p1", time.Minute); ok {
		t.Error("RenewLease(p1) renewed a lease that lapsed and p2 took")
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
			got[i], _ = s.AcquireLease(ctx, th, fmt.Sprintf("p%d", i), time.Minute)
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
