package runnertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
)

// TestInbox runs the contract of runner.Inbox against the stores
// newInbox returns, one per subtest. Several stores may share one backing
// server: the suite's threads and users have names of their own.
func TestInbox(t *testing.T, newInbox func(t *testing.T) runner.Inbox) {
	tests := []struct {
		name string
		run  func(t *testing.T, s runner.Inbox)
	}{
		{"Replace", testInboxReplace},
		{"ThreadsIsolated", testInboxIsolated},
		{"ConcurrentThreads", testInboxConcurrent},
		{"RecentDecisions", testRecentDecisions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, newInbox(t))
		})
	}
}

func entry(thread, call string, round int) runner.InboxEntry {
	return runner.InboxEntry{
		Thread: thread, Call: call, Round: round, Tool: "deploy", Requester: "U0ALICE", Team: "T1", Channel: "C1",
		Since:     time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC),
		Expires:   time.Date(2026, 1, 3, 3, 4, 5, 6000, time.UTC),
		Approvers: []string{"U0BOB", "S0OPS"}, SelfApproval: true,
	}
}

// entriesOf returns the store's entries of thread, sorted by call.
func entriesOf(t *testing.T, s runner.Inbox, thread string) []runner.InboxEntry {
	t.Helper()
	all, err := s.InboxEntries(context.Background())
	if err != nil {
		t.Fatalf("InboxEntries() error: %v", err)
	}
	var out []runner.InboxEntry
	for _, e := range all {
		if e.Thread == thread {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b runner.InboxEntry) int { return compareStrings(a.Call, b.Call) })
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sameEntries compares entries field by field, times by the instant.
func sameEntries(got, want []runner.InboxEntry) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if !g.Since.Equal(w.Since) || !g.Expires.Equal(w.Expires) {
			return false
		}
		g.Since, g.Expires, w.Since, w.Expires = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			return false
		}
	}
	return true
}

func testInboxReplace(t *testing.T, s runner.Inbox) {
	ctx, th := context.Background(), thread("inbox")
	a, b := entry(th, "1.0", 0), entry(th, "1.1", 0)
	u := &runner.InboxUpdate{Thread: th, Waiting: []runner.InboxEntry{a, b}}
	if err := s.UpdateInbox(ctx, u); err != nil || len(u.Replaced) != 0 {
		t.Fatalf("UpdateInbox(new thread) = %v, replaced %+v; want nothing replaced", err, u.Replaced)
	}
	if got := entriesOf(t, s, th); !sameEntries(got, []runner.InboxEntry{a, b}) {
		t.Fatalf("InboxEntries() = %+v, want %+v", got, []runner.InboxEntry{a, b})
	}
	b2 := entry(th, "1.1", 1)
	u = &runner.InboxUpdate{Thread: th, Waiting: []runner.InboxEntry{b2}}
	if err := s.UpdateInbox(ctx, u); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(u.Replaced, func(x, y runner.InboxEntry) int { return compareStrings(x.Call, y.Call) })
	if !sameEntries(u.Replaced, []runner.InboxEntry{a, b}) {
		t.Errorf("Replaced = %+v, want the two earlier entries", u.Replaced)
	}
	if got := entriesOf(t, s, th); !sameEntries(got, []runner.InboxEntry{b2}) {
		t.Errorf("InboxEntries() after the update = %+v, want only %+v", got, b2)
	}
	u = &runner.InboxUpdate{Thread: th}
	if err := s.UpdateInbox(ctx, u); err != nil || !sameEntries(u.Replaced, []runner.InboxEntry{b2}) {
		t.Errorf("UpdateInbox(nothing waits) = %v, replaced %+v; want %+v replaced", err, u.Replaced, b2)
	}
	if got := entriesOf(t, s, th); len(got) != 0 {
		t.Errorf("InboxEntries() after nothing waits = %+v, want none of the thread", got)
	}
	// Updating again is harmless.
	if err := s.UpdateInbox(ctx, &runner.InboxUpdate{Thread: th}); err != nil {
		t.Errorf("UpdateInbox(again) = %v", err)
	}
}

func testInboxIsolated(t *testing.T, s runner.Inbox) {
	ctx, x, y := context.Background(), thread("x"), thread("y")
	if err := s.UpdateInbox(ctx, &runner.InboxUpdate{Thread: x, Waiting: []runner.InboxEntry{entry(x, "1.0", 0)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateInbox(ctx, &runner.InboxUpdate{Thread: y, Waiting: []runner.InboxEntry{entry(y, "1.0", 0)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateInbox(ctx, &runner.InboxUpdate{Thread: y}); err != nil {
		t.Fatal(err)
	}
	if got := entriesOf(t, s, x); len(got) != 1 {
		t.Errorf("entries of x after y's were removed = %+v, want x's one", got)
	}
}

func testInboxConcurrent(t *testing.T, s runner.Inbox) {
	ctx := context.Background()
	const n = 16
	threads := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		threads[i] = thread(fmt.Sprint("c", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.UpdateInbox(ctx, &runner.InboxUpdate{Thread: threads[i], Waiting: []runner.InboxEntry{entry(threads[i], "1.0", 0)}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, th := range threads {
		if got := entriesOf(t, s, th); len(got) != 1 {
			t.Errorf("entries of %s = %+v, want one", th, got)
		}
	}
}

func testRecentDecisions(t *testing.T, s runner.Inbox) {
	ctx, th := context.Background(), thread("recent")
	bob, carol := fmt.Sprintf("U0BOB%d", rand.Int64()), fmt.Sprintf("U0CAROL%d", rand.Int64())
	if got, err := s.RecentDecisions(ctx, bob, 10); err != nil || len(got) != 0 {
		t.Fatalf("RecentDecisions(nobody yet) = %+v, %v; want none", got, err)
	}
	at := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	total := runner.RecentLimit + 5
	for i := range total {
		d := runner.DecisionRecord{Thread: th, Call: fmt.Sprint("1.", i), Tool: "deploy", Channel: "C1", By: bob,
			Kind: agent.Approve, At: at.Add(time.Duration(i) * time.Minute)}
		u := &runner.InboxUpdate{Thread: th, Decided: []runner.DecisionRecord{d}}
		if i == 0 {
			u.Decided = append(u.Decided, runner.DecisionRecord{Thread: th, Call: "1.0", Tool: "deploy", By: carol,
				Kind: agent.Reject, At: at, Reason: "not today"})
		}
		if err := s.UpdateInbox(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.RecentDecisions(ctx, bob, 100)
	if err != nil || len(got) != runner.RecentLimit {
		t.Fatalf("RecentDecisions(bob) = %d records, %v; want the newest %d", len(got), err, runner.RecentLimit)
	}
	if first := got[0]; first.Call != fmt.Sprint("1.", total-1) || first.Kind != agent.Approve || !first.At.Equal(at.Add(time.Duration(total-1)*time.Minute)) {
		t.Errorf("RecentDecisions(bob)[0] = %+v, want the last one", first)
	}
	if last := got[len(got)-1]; last.Call != fmt.Sprint("1.", total-runner.RecentLimit) {
		t.Errorf("RecentDecisions(bob) ends with %+v, want call 1.%d", last, total-runner.RecentLimit)
	}
	if got, _ := s.RecentDecisions(ctx, bob, 3); len(got) != 3 || got[0].Call != fmt.Sprint("1.", total-1) {
		t.Errorf("RecentDecisions(bob, 3) = %+v, want the 3 newest", got)
	}
	got, err = s.RecentDecisions(ctx, carol, 10)
	if err != nil || len(got) != 1 || got[0].Reason != "not today" || got[0].Kind != agent.Reject {
		t.Errorf("RecentDecisions(carol) = %+v, %v; want her one rejection", got, err)
	}
	if got := entriesOf(t, s, th); len(got) != 0 {
		t.Errorf("decisions alone added entries: %+v", got)
	}
}
