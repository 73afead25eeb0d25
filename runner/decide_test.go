package runner_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// A policy where only U0BOB and U0CAROL decide deploy and delete, and
// nobody approves their own request.
const approversYAML = `
tools:
  lookup: {approval: never}
  deploy: {approval: required, approvers: [U0BOB, U0CAROL], self_approval: false}
  delete: {approval: required, approvers: [U0BOB, U0CAROL], self_approval: false}
`

// policyWorld is a world under approversYAML whose model treats notes and
// "chat:" messages as talk, and plans the three calls for anything else.
func policyWorld(t *testing.T) (world, *target) {
	w, tg := newWorld(t)
	w.policy = approversYAML
	planCalls := plan(w.base)
	w.model = &agenttest.Planner{Plan: func(text string) []llm.ToolCall {
		if strings.Contains(text, "wrote in the thread while the calls waited") {
			return nil
		}
		return planCalls(text)
	}}
	return w, tg
}

func startIn(t *testing.T, svc *runner.Service, channel, requester string) {
	t.Helper()
	err := svc.Start(context.Background(), runner.StartRequest{Thread: "th", Requester: requester, Team: "T1", Channel: channel, Text: "ship"})
	if err != nil {
		t.Fatal(err)
	}
}

// inChannel is a decision on c made in channel C1 of team T1.
func inChannel(c agent.Call, kind agent.Kind, by string) runner.Decision {
	d := decision("th", c, kind, by)
	d.Team, d.Channel = "T1", "C1"
	return d
}

func TestDecideAppliesThePolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := policyWorld(t)
	svc, store := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")

	other := inChannel(deploy, agent.Approve, "U0BOB")
	other.Channel = "C2"
	staleHash := inChannel(deploy, agent.Approve, "U0BOB")
	staleHash.Hash = strings.Repeat("0", 64)
	oldRound := inChannel(deploy, agent.Approve, "U0BOB")
	oldRound.Round = 1
	otherTeam := inChannel(deploy, agent.Approve, "U0BOB")
	otherTeam.Team = "T2"
	badEdit := inChannel(deploy, agent.Edit, "U0BOB")
	badEdit.Args = []byte(`{"method":"GET","url":"http://x/","method":"DELETE"}`)
	tests := []struct {
		name    string
		d       runner.Decision
		refused bool
		want    error
	}{
		{"an outsider approves", inChannel(deploy, agent.Approve, "U0MALLORY"), true, nil},
		{"an outsider rejects", inChannel(deploy, agent.Reject, "U0MALLORY"), true, nil},
		{"an outsider edits", inChannel(deploy, agent.Edit, "U0MALLORY"), true, nil},
		{"the requester approves their own call", inChannel(deploy, agent.Approve, "U0ALICE"), true, nil},
		{"an approver clicks in another channel", other, true, nil},
		{"an approver clicks from another team", otherTeam, true, nil},
		{"a pending call is marked done", inChannel(deploy, agent.MarkDone, "U0BOB"), true, nil},
		{"a card with other arguments", staleHash, false, runner.ErrNotPending},
		{"a card of another round", oldRound, false, runner.ErrNotPending},
		{"an edit with a duplicate key", badEdit, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := svc.Decide(ctx, tt.d)
			var refused *runner.RefusedError
			var invalid *runner.InvalidArgsError
			switch {
			case tt.refused && !errors.As(err, &refused):
				t.Errorf("Decide() = %v, want a refusal", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Errorf("Decide() = %v, want %v", err, tt.want)
			case !tt.refused && tt.want == nil && !errors.As(err, &invalid):
				t.Errorf("Decide() = %v, want invalid arguments", err)
			}
		})
	}
	claims, err := store.Claims(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	for k := range claims {
		if strings.HasPrefix(k, "decision:") {
			t.Errorf("claim %s recorded after refused decisions", k)
		}
	}
	entries, err := redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix}).AuditEntries(ctx, "", time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	refusals := 0
	for _, e := range entries {
		if e.Fields["decision"] == "refused" {
			refusals++
		}
	}
	if refusals != 7 {
		t.Errorf("%d refusals audited, want 7", refusals)
	}

	// The requester may withdraw their own request; an approver decides.
	if err := svc.Decide(ctx, inChannel(waitingCall(t, svc, "th", "delete"), agent.Reject, "U0ALICE")); err != nil {
		t.Errorf("Decide(requester rejects own call) = %v, want nil", err)
	}
	if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0CAROL")); err != nil {
		t.Errorf("Decide(approver) = %v, want nil", err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	if n := tg.Count("POST /delete"); n != 0 {
		t.Errorf("delete ran %d times, want 0", n)
	}
}

// TestReplyCannotApproveOnesOwnRequest: an approver who replies in
// someone else's finished thread asks for the next turn's calls, and so
// may not approve them.
func TestReplyCannotApproveOnesOwnRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := policyWorld(t)
	svc, _ := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	for _, tool := range []string{"deploy", "delete"} {
		if err := svc.Decide(ctx, inChannel(waitingCall(t, svc, "th", tool), agent.Reject, "U0BOB")); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reply(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0BOB", Text: "ship it again"}); err != nil {
		t.Fatal(err)
	}
	deploy := waitingCall(t, svc, "th", "deploy")
	if deploy.Requester != "U0BOB" {
		t.Errorf("the new turn's call was asked for by %q, want U0BOB", deploy.Requester)
	}
	var refused *runner.RefusedError
	if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0BOB")); !errors.As(err, &refused) {
		t.Fatalf("Decide(U0BOB approves the call he asked for) = %v, want a refusal", err)
	}
	if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0CAROL")); err != nil {
		t.Fatalf("Decide(U0CAROL) = %v", err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// TestOutsidersReplyRejectsNothing: a reply from someone who may decide
// none of the waiting calls rejects nothing — pending or outcome unknown
// — and reaches the model as a note once the calls are decided.
func TestOutsidersReplyRejectsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := policyWorld(t)
	svc, _ := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")

	err := svc.Reply(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0MALLORY", Text: "Rejected: do not deploy"})
	var refused *runner.RefusedError
	if !errors.As(err, &refused) || !refused.Noted {
		t.Fatalf("Reply(outsider) = %v, want a refusal that kept a note", err)
	}
	res, err := svc.State(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if w := res.State.Waiting(); res.Status() != graph.Paused || len(w) != 2 {
		t.Fatalf("after the outsider's reply: %s with %d waiting, want paused with both calls", res.Status(), len(w))
	}
	for _, tool := range []string{"deploy", "delete"} {
		if err := svc.Decide(ctx, inChannel(waitingCall(t, svc, "th", tool), agent.Approve, "U0BOB")); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if got := []int{tg.Count("POST /deploy"), tg.Count("POST /delete")}; got[0] != 1 || got[1] != 1 {
		t.Errorf("deploy and delete ran %v times, want once each", got)
	}
	res, err = svc.State(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range res.State.Messages {
		if m.Role == llm.RoleUser && strings.Contains(m.Content, "user U0MALLORY") && strings.Contains(m.Content, "Rejected: do not deploy") {
			found = true
		}
	}
	if res.Status() != graph.Done || !found {
		t.Errorf("after the decisions: %s, note in the conversation %v; want done with the note", res.Status(), found)
	}

	// A reply from an approver is feedback that rejects.
	if err := svc.Reply(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0ALICE", Text: "again please"}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reply(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0CAROL", Text: "not now"}); err != nil {
		t.Fatalf("Reply(approver) = %v, want nil", err)
	}
	res, _ = svc.State(ctx, "th")
	if res.Status() != graph.Done || !strings.Contains(res.State.Answer(), "Rejected by user U0CAROL: not now") {
		t.Errorf("after an approver's reply: %s %q; want done, both rejected with her words", res.Status(), res.State.Answer())
	}
}

// TestRetryFollowsThePolicy: Retry, Mark done and Skip on an
// outcome-unknown card, and Retry on an error card, are decisions like
// Approve.
func TestRetryFollowsThePolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := policyWorld(t)
	w.model = failingModel{}
	svc, _ := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	var refused *runner.RefusedError
	if err := svc.Retry(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0MALLORY"}); !errors.As(err, &refused) {
		t.Errorf("Retry(outsider) = %v, want a refusal", err)
	}
	if err := svc.Retry(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C2", By: "U0ALICE"}); !errors.As(err, &refused) {
		t.Errorf("Retry(from another channel) = %v, want a refusal", err)
	}
	if err := svc.Retry(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0BOB"}); err != nil {
		t.Errorf("Retry(approver) = %v, want nil", err)
	}
}

type failingModel struct{}

func (failingModel) Name() string { return "down" }
func (failingModel) Generate(context.Context, []llm.Message, []llm.ToolDef) (llm.Message, error) {
	return llm.Message{}, errors.New("provider down")
}

// TestOneLoadPerDecision: a click costs at most one load of the
// conversation (none when this process has the thread's latest state).
func TestOneLoadPerDecision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := policyWorld(t)
	w.loads = new(atomic.Int64)
	svc, _ := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")
	for _, d := range []runner.Decision{
		inChannel(deploy, agent.Approve, "U0MALLORY"), // refused
		inChannel(deploy, agent.Approve, "U0BOB"),     // wins
	} {
		before := w.loads.Load()
		_ = svc.Decide(ctx, d)
		if n := w.loads.Load() - before; n > 1 {
			t.Errorf("Decide(%s by %s) loaded the conversation %d times, want at most 1", d.Kind, d.By, n)
		}
	}
}
