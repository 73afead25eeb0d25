package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// refusals counts the world's audit entries of refused decisions.
func refusals(t *testing.T, w world) int {
	t.Helper()
	store := redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix})
	entries, err := store.AuditEntries(context.Background(), "", time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.Fields["decision"] == "refused" {
			n++
		}
	}
	return n
}

// Every kind of refusal is audited exactly once, whether the process
// that checks it has seen the thread (its cached state is checked first)
// or not (the stored state is checked).
func TestEachRefusalIsAuditedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := policyWorld(t)
	w.policy = `
tools:
  lookup: {approval: never}
  deploy: {approval: required, approvers: [U0BOB, U0CAROL], self_approval: false}
  delete: {approval: required, approvers: [U0BOB, U0CAROL], self_approval: false, decisions: [approve, reject]}
`
	started, _ := w.service(t, nil, time.Second)
	startIn(t, started, "C1", "U0ALICE")
	deploy, del := waitingCall(t, started, "th", "deploy"), waitingCall(t, started, "th", "delete")

	// The same bot after an update that no longer offers deploy.
	updatedWorld := w
	updatedWorld.policy = "tools:\n  lookup: {approval: never}\n  delete: {approval: required, approvers: [U0BOB]}\n"

	otherChannel := inChannel(deploy, agent.Approve, "U0BOB")
	otherChannel.Channel = "C2"
	otherTeam := inChannel(deploy, agent.Approve, "U0BOB")
	otherTeam.Team = "T2"
	tests := []struct {
		name    string
		updated bool
		d       runner.Decision
	}{
		{"someone who is not an approver", false, inChannel(deploy, agent.Approve, "U0MALLORY")},
		{"the requester approves their own request", false, inChannel(deploy, agent.Approve, "U0ALICE")},
		{"a card of another channel", false, otherChannel},
		{"a card of another workspace", false, otherTeam},
		{"an unknown person", false, inChannel(deploy, agent.Approve, "")},
		{"a decision no person makes", false, inChannel(deploy, agent.Expire, "U0BOB")},
		{"a decision the rule does not offer", false, inChannel(del, agent.Edit, "U0BOB")},
		{"a decision that does not apply to the call's status", false, inChannel(deploy, agent.MarkDone, "U0BOB")},
		{"a tool the bot no longer offers", true, inChannel(deploy, agent.Approve, "U0BOB")},
	}
	for _, tt := range tests {
		for _, seen := range []bool{false, true} {
			name := fmt.Sprintf("%s (process has seen the thread: %v)", tt.name, seen)
			ww := w
			if tt.updated {
				ww = updatedWorld
			}
			svc, _ := ww.service(t, nil, time.Second)
			if seen {
				if _, err := svc.State(ctx, "th"); err != nil {
					t.Fatal(err)
				}
			}
			before := refusals(t, w)
			err := svc.Decide(ctx, tt.d)
			var refused *runner.RefusedError
			if !errors.As(err, &refused) || refused.TryAgain {
				t.Errorf("%s: Decide = %v, want a refusal", name, err)
				continue
			}
			if n := refusals(t, w) - before; n != 1 {
				t.Errorf("%s: %d refusals audited, want 1", name, n)
			}
		}
	}
	if tg.Count("POST /deploy") != 0 || tg.Count("POST /delete") != 0 {
		t.Errorf("deploy ran %d, delete %d times; want neither", tg.Count("POST /deploy"), tg.Count("POST /delete"))
	}
}

// An edit's arguments are checked once per decision — when Decide
// claims it — and the claim carries them canonical with their hash: the
// decision's application and the call's run trust that claim. The check
// sees the canonical arguments.
func TestAnEditIsCheckedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, seen := range []bool{true, false} {
		w, tg := newWorld(t)
		w.deployChecks = &checkCounter{}
		started, _ := w.service(t, nil, time.Second)
		if err := started.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
			t.Fatal(err)
		}
		deploy := waitingCall(t, started, "th", "deploy")
		svc := started // it has seen the thread
		if !seen {
			svc, _ = w.service(t, nil, time.Second)
		}
		before := len(w.deployChecks.seen())
		d := decision("th", deploy, agent.Edit, "U_BOB")
		d.Args = json.RawMessage(fmt.Sprintf(` { "url" : %q, "method":"POST",  "body": "v3" } `, w.base+"/deploy"))
		if err := svc.Decide(ctx, d); err != nil {
			t.Fatalf("Decide(edit) = %v", err)
		}
		if _, err := finish(ctx, svc, "th", "U_BOB", agent.Approve, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if n := tg.Count("POST /deploy"); n != 1 {
			t.Fatalf("deploy ran %d times, want once", n)
		}
		canonical, _ := tools.Canonical(d.Args)
		got := w.deployChecks.seen()[before:]
		if len(got) != 1 || got[0] != string(canonical) {
			t.Errorf("seen the thread: %v: the edit's arguments were checked %d times (%q); want once, canonical (%s)", seen, len(got), got, canonical)
		}
	}
}
