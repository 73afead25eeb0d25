package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/audit"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// TestSaveCarriesAClaim walks a save that carries a click's claim
// (runner.SavedClaim) through each of its outcomes, on each Redis the
// store runs on: what it writes and what it leaves as it was. On a
// Cluster a save carries no claim (its schedule and audit stream are
// other slots): the store says so, and such a save writes nothing.
func TestSaveCarriesAClaim(t *testing.T) {
	t.Parallel()
	for name, server := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := redisstore.New(server(t), redisstore.Options{Prefix: uniqueName("claimsave")})
			cluster := name == "cluster"
			if got := store.ClaimsWithSaves(); got == cluster {
				t.Fatalf("ClaimsWithSaves() = %v on %s", got, name)
			}
			// A paused thread: its head is cp-1.
			thread := uniqueName("T1:C1")
			first := firstCheckpoint(thread, "ship it")
			first.Status = graph.Paused
			mustSave(t, store, first)

			// save makes the next checkpoint's save carry a claim by who,
			// fenced by a token of its own, and returns what it did.
			save := func(who string, parent *graph.Checkpoint) (runner.ClaimResult, bool, error) {
				token := runner.NewLeaseToken(who)
				sc := &runner.SavedClaim{Token: token, Claim: runner.DecisionClaim{Thread: thread, Key: "decision:c1#0",
					Value: []byte(`{"kind":"approve","by":"` + who + `"}`), ExpectHead: parent.ID,
					WakeBy: time.Now().Add(time.Minute), LeaseTTL: time.Minute, Keys: []string{"decision:c1#0", "answered", "shown:c1#0"},
					Record: []string{"shown:c1#0"}, Answered: 1,
					Audit: map[string]string{"event": "decision", "thread": thread, "by": who}}}
				cp := nextCheckpoint(parent, "approved by "+who)
				runCtx := runner.WithSavedClaim(graph.WithFence(ctx, token), sc)
				err := store.Save(runCtx, cp)
				r, answered := sc.Answered()
				// Once answered, a later save of the run carries nothing:
				// it is a plain save if the claim's was made, else fenced.
				if answered && r.Outcome != runner.ClaimSaved {
					if err := store.Save(runCtx, cp); !errors.Is(err, redisstore.ErrFenced) {
						t.Errorf("a later save of a run whose claim was not saved = %v, want ErrFenced", err)
					}
				}
				return r, answered, err
			}
			head := func() string {
				t.Helper()
				cp, err := store.Load(ctx, thread)
				if err != nil {
					t.Fatal(err)
				}
				return cp.ID
			}

			if cluster {
				_, answered, err := save("U_BOB", first)
				if err == nil || answered || head() != first.ID {
					t.Fatalf("a save with a claim on a cluster = %v, answered %v, head %s; want an error, nothing written", err, answered, head())
				}
				claims, _ := store.ClaimValues(ctx, thread, []string{"decision:c1#0"})
				if len(claims) != 0 {
					t.Fatalf("the claim was written: %q", claims)
				}
				return
			}

			// Stale: the head is not the parent. Nothing is written.
			stale := *first
			stale.ID = "cp-0"
			if r, _, err := save("U_EVE", &stale); r.Outcome != runner.ClaimStale || !errors.Is(err, redisstore.ErrFenced) {
				t.Fatalf("a save from a stale checkpoint = %+v, %v; want ClaimStale, fenced", r, err)
			}
			if claims, _ := store.ClaimValues(ctx, thread, []string{"decision:c1#0"}); len(claims) != 0 {
				t.Fatalf("a stale claim was written: %q", claims)
			}

			// Busy: another acquisition holds the lease — of the same
			// owner: the fence is the acquisition's token, not the
			// process's name. The claim is written, not the checkpoint.
			other, err := store.AcquireLease(ctx, thread, "U_BOB", time.Minute)
			if err != nil || other == "" {
				t.Fatalf("AcquireLease = %q, %v", other, err)
			}
			if r, _, err := save("U_BOB", first); r.Outcome != runner.ClaimBusy || !errors.Is(err, redisstore.ErrFenced) {
				t.Fatalf("a save while the lease is held = %+v, %v; want ClaimBusy, fenced", r, err)
			}
			if head() != first.ID {
				t.Fatalf("the checkpoint was saved while another held the lease")
			}
			claims, _ := store.ClaimValues(ctx, thread, []string{"decision:c1#0"})
			if string(claims["decision:c1#0"]) != `{"kind":"approve","by":"U_BOB"}` {
				t.Fatalf("claims after a busy save = %q, want U_BOB's", claims)
			}
			if err := store.ReleaseLease(ctx, thread, other); err != nil {
				t.Fatal(err)
			}

			// Lost: the claim is someone else's. Nothing more is written,
			// the lease is left free.
			if r, _, err := save("U_CAROL", first); r.Outcome != runner.ClaimLost || string(r.Winner) != `{"kind":"approve","by":"U_BOB"}` ||
				!errors.Is(err, redisstore.ErrFenced) {
				t.Fatalf("a save whose claim is lost = %+v, %v; want ClaimLost naming U_BOB, fenced", r, err)
			}
			if token, err := store.AcquireLease(ctx, thread, "probe", time.Minute); err != nil || token == "" {
				t.Fatalf("the lease after a lost claim: %q, %v; want it free", token, err)
			} else if err := store.ReleaseLease(ctx, thread, token); err != nil {
				t.Fatal(err)
			}

			// Saved: on another call of a fresh thread, the claim, the
			// lease and the checkpoint in one step, with the claims asked
			// for read back.
			thread = uniqueName("T1:C1")
			first = firstCheckpoint(thread, "ship it")
			first.Status = graph.Paused
			mustSave(t, store, first)
			r, _, err := save("U_DAN", first)
			if r.Outcome != runner.ClaimSaved || err != nil || string(r.Claims["decision:c1#0"]) != `{"kind":"approve","by":"U_DAN"}` {
				t.Fatalf("a save whose claim wins = %+v, %v; want ClaimSaved with the claim read back", r, err)
			}
			// The claims it reports are the thread's as stored: the claim,
			// the delivery it recorded and the answered count.
			stored, err := store.ClaimValues(ctx, thread, []string{"decision:c1#0", "answered", "shown:c1#0"})
			if err != nil || len(stored) != 3 || len(r.Claims) != 3 {
				t.Fatalf("claims reported %q, stored %q (%v); want all three of each", r.Claims, stored, err)
			}
			for k, v := range stored {
				if string(r.Claims[k]) != string(v) {
					t.Errorf("claim %s reported %q, stored %q", k, r.Claims[k], v)
				}
			}
			if head() != "cp-2" {
				t.Fatalf("head after the save = %s, want cp-2", head())
			}
			if token, err := store.AcquireLease(ctx, thread, "probe", time.Minute); err != nil || token != "" {
				t.Fatalf("AcquireLease after the save = %q, %v; want the lease held by the save's token", token, err)
			}
			due, err := store.Due(ctx, time.Now().Add(2*time.Minute), 100)
			if err != nil || !contains(due, thread) {
				t.Errorf("Due = %v, %v; want the thread woken within a lease", due, err)
			}

			// Leased: the claim wins and the lease is taken, but the
			// checkpoint does not follow the stored one (its journal):
			// the claim and the lease stand, the checkpoint is not saved.
			thread = uniqueName("T1:C1")
			first = firstCheckpoint(thread, "ship it")
			first.Status = graph.Paused
			mustSave(t, store, first)
			bad := *first
			bad.JournalLen++ // the next checkpoint's journal starts past the stored one's
			r, _, err = save("U_ERIN", &bad)
			if r.Outcome != runner.ClaimLeased || !errors.Is(err, redisstore.ErrFenced) || head() != first.ID {
				t.Fatalf("a save that does not follow = %+v, %v, head %s; want ClaimLeased, fenced, head %s", r, err, head(), first.ID)
			}
			if token, err := store.AcquireLease(ctx, thread, "probe", time.Minute); err != nil || token != "" {
				t.Fatalf("AcquireLease after ClaimLeased = %q, %v; want the lease held", token, err)
			}
		})
	}
}

// TestClaimSaveChainsTheDecisionAndTheSave: a save that carries a claim
// appends the decision's audit entry and the save's in one step, the
// second chained to the first. Each is appended only onto the head it
// was sealed after: when another process moved the head, neither goes
// in with the save (the decision's follows on its own, the save's stay
// with the runner), and when the decision's append trims old entries,
// the save's still follows it. The chain verifies in every case.
func TestClaimSaveChainsTheDecisionAndTheSave(t *testing.T) {
	t.Parallel()
	for name, server := range everyRedis() {
		if name == "cluster" {
			continue // a save carries no claim there (TestSaveCarriesAClaim)
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rdb := server(t)
			prefix := uniqueName("claimsave-audit")
			const retention = 24 * time.Hour
			store := redisstore.New(rdb, redisstore.Options{Prefix: prefix, AuditRetention: retention})

			// claimSave resumes a fresh paused thread with who's decision,
			// through st, with the save's own entry, and returns what it
			// did and whether the save's entry is still to be appended.
			claimSave := func(st *redisstore.Store, who string) (runner.ClaimResult, bool) {
				t.Helper()
				thread := uniqueName("T1:C1")
				first := firstCheckpoint(thread, "ship it")
				first.Status = graph.Paused
				mustSave(t, st, first)
				token := runner.NewLeaseToken(who)
				sc := &runner.SavedClaim{Token: token, Claim: runner.DecisionClaim{Thread: thread, Key: "decision:c1#0",
					Value: []byte(`{"kind":"approve","by":"` + who + `"}`), ExpectHead: first.ID,
					WakeBy: time.Now().Add(time.Minute), LeaseTTL: time.Minute, Keys: []string{"decision:c1#0"},
					Audit: map[string]string{"event": "decision", "thread": thread, "by": who}}}
				sa := &runner.SaveAudit{Records: []map[string]string{{"event": "execution", "thread": thread, "tool": "deploy"}}}
				runCtx := runner.WithSaveAudit(runner.WithSavedClaim(graph.WithFence(ctx, token), sc), sa)
				if err := st.Save(runCtx, nextCheckpoint(first, "approved by "+who)); err != nil {
					t.Fatalf("Save with %s's claim = %v", who, err)
				}
				r, _ := sc.Answered()
				if r.Outcome != runner.ClaimSaved || r.AuditErr != nil {
					t.Fatalf("the claim of %s = %+v; want ClaimSaved, its entry appended", who, r)
				}
				return r, sa.Pending()
			}
			// chain verifies the trail and returns its entries' events.
			chain := func() ([]string, audit.Report) {
				t.Helper()
				rep, err := store.VerifyAudit(ctx)
				if err != nil {
					t.Fatalf("VerifyAudit = %v", err)
				}
				entries, err := store.AuditEntries(ctx, "", time.Time{}, 100)
				if err != nil {
					t.Fatal(err)
				}
				var events []string
				for _, e := range entries {
					events = append(events, e.Fields["event"]+":"+e.Fields["by"]+e.Fields["tool"])
				}
				return events, rep
			}

			if err := store.Audit(ctx, map[string]string{"event": "start"}); err != nil {
				t.Fatal(err)
			}
			if _, pending := claimSave(store, "U_BOB"); pending {
				t.Fatal("the save's entry was not appended with the save")
			}
			events, _ := chain()
			if want := []string{"start:", "decision:U_BOB", "execution:deploy"}; !slices.Equal(events, want) {
				t.Fatalf("entries = %v, want %v", events, want)
			}

			// Another process appends: the head this store sealed after is
			// gone. Neither entry goes in with the save.
			other := redisstore.New(rdb, redisstore.Options{Prefix: prefix, AuditRetention: retention})
			if err := other.Audit(ctx, map[string]string{"event": "other"}); err != nil {
				t.Fatal(err)
			}
			if _, pending := claimSave(store, "U_CAROL"); !pending {
				t.Fatal("the save's entry was appended after a head that moved")
			}
			events, _ = chain()
			if want := []string{"start:", "decision:U_BOB", "execution:deploy", "other:", "decision:U_CAROL"}; !slices.Equal(events, want) {
				t.Fatalf("entries after the head moved = %v, want %v", events, want)
			}

			// A process whose clock is past the retention of every entry:
			// the decision's append trims them, and the save's follows it.
			// An append trims the entries of milliseconds before its own
			// (the server's clock names them), not those of its own: once
			// the server's clock has left the millisecond of the entries
			// so far, none of them shares one with the next.
			passed, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			for {
				now, err := rdb.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				if now.UnixMilli() > passed.UnixMilli() {
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
			later := redisstore.New(rdb, redisstore.Options{Prefix: prefix, AuditRetention: retention,
				Now: func() time.Time { return time.Now().Add(retention + time.Hour) }})
			if err := later.Audit(ctx, map[string]string{"event": "later"}); err != nil {
				t.Fatal(err)
			}
			if _, pending := claimSave(later, "U_DAN"); pending {
				t.Fatal("the save's entry was not appended after a decision's that trimmed")
			}
			events, rep := chain()
			head, err := store.AuditHead(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Each append trims what came before it, but for entries of
			// its own millisecond: the save's entry (8) is kept, after
			// those of 6 and 7 that were not trimmed, and the head says
			// where the trimmed entries end.
			tail := []string{"later:", "decision:U_DAN", "execution:deploy"}
			if rep.First < 6 || rep.First > 8 {
				t.Fatalf("after trimming appends: the first entry kept is %d, want 6 to 8 (%v)", rep.First, events)
			}
			if want := tail[rep.First-6:]; !slices.Equal(events, want) || rep.Last != (audit.Head{Hash: head.Hash, Seq: head.Seq}) ||
				head.Seq != 8 || head.Trimmed != rep.First-1 || rep.Trimmed != head.Trimmed {
				t.Fatalf("after trimming appends: entries %v, report %+v, head %+v; want the save's entry last, seq 8, those before the first kept trimmed", events, rep, head)
			}
		})
	}
}

// TestClaimSaveKeepsTheAuditHeadOnEveryWayOut: the decision's entry of a
// save that carries a claim and entries of its own leaves the write of
// the audit head to the save's entries; when the save is not made — the
// lease held by another acquisition, or a checkpoint that does not
// follow the stored one — the head is the decision's all the same: the
// chain verifies, and the next entry follows it.
func TestClaimSaveKeepsTheAuditHeadOnEveryWayOut(t *testing.T) {
	t.Parallel()
	for name, server := range everyRedis() {
		if name == "cluster" {
			continue // a save carries no claim there (TestSaveCarriesAClaim)
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := redisstore.New(server(t), redisstore.Options{Prefix: uniqueName("claimsave-head")})
			// A first entry: the head then knows the stream's oldest,
			// and appends that trim nothing follow.
			if err := store.Audit(ctx, map[string]string{"event": "start"}); err != nil {
				t.Fatal(err)
			}
			for _, tt := range []struct {
				name string
				want runner.ClaimOutcome
				// prepare returns the checkpoint the save follows.
				prepare func(thread string, first *graph.Checkpoint) *graph.Checkpoint
			}{
				{"busy", runner.ClaimBusy, func(thread string, first *graph.Checkpoint) *graph.Checkpoint {
					if token, err := store.AcquireLease(ctx, thread, "other", time.Minute); err != nil || token == "" {
						t.Fatalf("AcquireLease = %q, %v", token, err)
					}
					return first
				}},
				{"leased", runner.ClaimLeased, func(_ string, first *graph.Checkpoint) *graph.Checkpoint {
					bad := *first
					bad.JournalLen++ // the next checkpoint's journal starts past the stored one's
					return &bad
				}},
				{"saved", runner.ClaimSaved, func(_ string, first *graph.Checkpoint) *graph.Checkpoint { return first }},
			} {
				thread := uniqueName("T1:C1")
				first := firstCheckpoint(thread, "ship it")
				first.Status = graph.Paused
				mustSave(t, store, first)
				parent := tt.prepare(thread, first)
				token := runner.NewLeaseToken("U_BOB")
				sc := &runner.SavedClaim{Token: token, Claim: runner.DecisionClaim{Thread: thread, Key: "decision:c1#0",
					Value: []byte(`{"kind":"approve","by":"U_BOB"}`), ExpectHead: first.ID,
					WakeBy: time.Now().Add(time.Minute), LeaseTTL: time.Minute, Keys: []string{"decision:c1#0"},
					Audit: map[string]string{"event": "decision", "thread": thread, "by": "U_BOB"}}}
				sa := &runner.SaveAudit{Records: []map[string]string{{"event": "execution", "thread": thread, "tool": "deploy"}}}
				_ = store.Save(runner.WithSaveAudit(runner.WithSavedClaim(graph.WithFence(ctx, token), sc), sa), nextCheckpoint(parent, "approved"))
				r, _ := sc.Answered()
				if r.Outcome != tt.want || r.AuditErr != nil {
					t.Fatalf("%s: the claim = %+v; want outcome %v, its entry appended", tt.name, r, tt.want)
				}
				if pending := sa.Pending(); pending != (tt.want != runner.ClaimSaved) {
					t.Fatalf("%s: the save's entries pending = %v", tt.name, pending)
				}
				if err := store.Audit(ctx, map[string]string{"event": "after", "thread": thread}); err != nil {
					t.Fatal(err)
				}
				rep, err := store.VerifyAudit(ctx)
				if err != nil {
					t.Fatalf("%s: VerifyAudit = %+v, %v", tt.name, rep, err)
				}
				entries, err := store.AuditEntries(ctx, "", time.Time{}, 100)
				if err != nil || len(entries) < 2 {
					t.Fatalf("AuditEntries = %v, %v", entries, err)
				}
				var events []string
				for _, e := range entries {
					if e.Fields["thread"] == thread {
						events = append(events, e.Fields["event"])
					}
				}
				want := []string{"decision", "after"}
				if tt.want == runner.ClaimSaved {
					want = []string{"decision", "execution", "after"}
				}
				if !slices.Equal(events, want) {
					t.Fatalf("%s: the thread's entries = %v, want %v", tt.name, events, want)
				}
			}
		})
	}
}
