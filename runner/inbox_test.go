package runner_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
)

// inboxYAML: deploy waits for U0BOB only, never for its requester; delete
// for anyone in the channel, its requester included.
const inboxYAML = `
tools:
  lookup: {approval: never}
  deploy: {approval: required, approvers: [U0BOB], self_approval: false}
  delete: {approval: required, approvers: anyone, self_approval: true, expires_after: 1h}
`

// channelMembers is a runner.Members: the people of each channel.
type channelMembers struct {
	mu     sync.Mutex
	people map[string][]string
	asked  int
}

func (m *channelMembers) InChannel(_ context.Context, channel, user string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked++
	return slices.Contains(m.people[channel], user), nil
}

func inboxWorld(t *testing.T) (world, *target) {
	w, tg := newWorld(t)
	w.policy, w.inbox = inboxYAML, true
	w.members = &channelMembers{people: map[string][]string{"C1": {"U0ALICE", "U0BOB", "U0CAROL"}}}
	return w, tg
}

// tools lists the tools of waiting calls, in order.
func toolsOf(ws []runner.Waiting) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Tool)
	}
	return out
}

// inboxEvents returns the inbox_changed events reported so far.
func (r *recorder) inboxEvents() []runner.InboxChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []runner.InboxChange
	for _, e := range r.events {
		if e.Kind == runner.InboxChanged {
			out = append(out, *e.Inbox)
		}
	}
	return out
}

// The inbox lists each pending call for the people it waits for: a
// listed approver, anyone in the channel when the rule names nobody —
// and not the requester when self-approval is off, nor someone outside
// the channel.
func TestInboxListsCallsForWhomTheyWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := inboxWorld(t)
	rep := &recorder{}
	svc, _ := w.service(t, rep, time.Second)
	startIn(t, svc, "C1", "U0ALICE")

	// Newest first: the model asked for delete after deploy.
	all, err := svc.WaitingCalls(ctx, runner.InboxQuery{})
	if err != nil || !slices.Equal(toolsOf(all), []string{"delete", "deploy"}) {
		t.Fatalf("WaitingCalls(everyone) = %v, %v; want delete and deploy", toolsOf(all), err)
	}
	deploy := all[1]
	if deploy.Requester != "U0ALICE" || deploy.Channel != "C1" || deploy.Team != "T1" || deploy.Since.IsZero() ||
		!slices.Equal(deploy.Approvers, []string{"U0BOB"}) || deploy.SelfApproval || deploy.AgentCall.RunHash() == "" {
		t.Errorf("deploy's entry = %+v, want its requester, channel, time, approvers and call", deploy)
	}
	tests := []struct {
		user string
		want []string
	}{
		{"U0BOB", []string{"delete", "deploy"}}, // in the channel, and the approver
		{"U0CAROL", []string{"delete"}},         // in the channel only
		{"U0ALICE", []string{"delete"}},         // the requester: delete allows self-approval, deploy not
		{"U0MALLORY", nil},                      // neither
	}
	for _, tt := range tests {
		got, err := svc.WaitingCalls(ctx, runner.InboxQuery{User: tt.user})
		if err != nil || !slices.Equal(toolsOf(got), tt.want) {
			t.Errorf("WaitingCalls(%s) = %v, %v; want %v", tt.user, toolsOf(got), err, tt.want)
		}
	}
	if got, _ := svc.WaitingCalls(ctx, runner.InboxQuery{User: "U0BOB", Limit: 1}); len(got) != 1 {
		t.Errorf("WaitingCalls(U0BOB, 1) = %d calls, want 1", len(got))
	}
	onlyDeploy := func(e runner.InboxEntry) bool { return e.Tool == "deploy" }
	if got, _ := svc.WaitingCalls(ctx, runner.InboxQuery{Where: onlyDeploy}); !slices.Equal(toolsOf(got), []string{"deploy"}) {
		t.Errorf("WaitingCalls(deploy only) = %v, want deploy", toolsOf(got))
	}
	events := rep.inboxEvents()
	if len(events) != 1 || len(events[0].Added) != 2 || len(events[0].Removed) != 0 {
		t.Errorf("inbox events = %+v, want one adding the two calls", events)
	}
}

// A decision from the inbox carries no channel: the runner still checks
// who decides — the approvers for deploy, and for delete (anyone in the
// channel) membership of the call's channel — and a claimed call leaves
// the inbox at once; once applied, it is among its decider's recent
// decisions, and the tool ran once.
func TestDecideFromTheInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := inboxWorld(t)
	rep := &recorder{}
	svc, _ := w.service(t, rep, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")
	del := waitingCall(t, svc, "th", "delete")
	fromInbox := func(c agent.Call, kind agent.Kind, by string) runner.Decision {
		d := decision("th", c, kind, by)
		d.Team, d.FromInbox = "T1", true
		return d
	}

	// A refusal names people and channels by ID, in plain words; a front
	// end renders them its way (here: [people] and {channel}), and
	// escapes the words (here: upper case).
	refusals := []struct {
		name     string
		d        runner.Decision
		why      string
		rendered string
	}{
		{"not an approver", fromInbox(deploy, agent.Approve, "U0CAROL"), "only user U0BOB", "ONLY [U0BOB] MAY APPROVE THIS CALL"},
		{"the requester", fromInbox(deploy, agent.Approve, "U0ALICE"), "yourself", "YOU ASKED FOR THIS CALL AND MAY NOT APPROVE IT YOURSELF"},
		{"outside the channel", fromInbox(del, agent.Approve, "U0MALLORY"), "only members of channel C1", "ONLY MEMBERS OF {C1} MAY DECIDE THIS CALL"},
		{"another workspace", func() runner.Decision { d := fromInbox(deploy, agent.Approve, "U0BOB"); d.Team = "T2"; return d }(), "another workspace", "THIS CALL BELONGS TO ANOTHER WORKSPACE"},
	}
	for _, tt := range refusals {
		err := svc.Decide(ctx, tt.d)
		var refused *runner.RefusedError
		if !errors.As(err, &refused) || !strings.Contains(refused.Why, tt.why) {
			t.Errorf("%s: Decide() = %v, want refused saying %q", tt.name, err, tt.why)
			continue
		}
		got := refused.Render(strings.ToUpper,
			func(ids []string) string { return "[" + strings.Join(ids, ",") + "]" },
			func(id string) string { return "{" + id + "}" })
		if got != tt.rendered {
			t.Errorf("%s: Render() = %q, want %q", tt.name, got, tt.rendered)
		}
	}
	// A channel on an inbox decision is not what is checked.
	d := fromInbox(deploy, agent.Approve, "U0BOB")
	d.Channel = "C9"
	if err := svc.Decide(ctx, d); err != nil {
		t.Fatalf("Decide(bob approves deploy from the inbox) = %v", err)
	}
	if got, _ := svc.WaitingCalls(ctx, runner.InboxQuery{User: "U0BOB"}); !slices.Equal(toolsOf(got), []string{"delete"}) {
		t.Errorf("bob's inbox right after his approval = %v, want only delete", toolsOf(got))
	}
	if err := svc.Decide(ctx, fromInbox(del, agent.Reject, "U0CAROL")); err != nil {
		t.Fatalf("Decide(carol, in the channel, rejects delete from the inbox) = %v", err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n, m := tg.Count("POST /deploy"), tg.Count("POST /delete"); n != 1 || m != 0 {
		t.Errorf("deploy ran %d times and delete %d, want 1 and 0", n, m)
	}
	if all, _ := svc.WaitingCalls(ctx, runner.InboxQuery{}); len(all) != 0 {
		t.Errorf("the inbox after the decisions = %v, want empty", toolsOf(all))
	}
	recent, err := svc.RecentDecisions(ctx, "U0BOB", 10)
	if err != nil || len(recent) != 1 || recent[0].Tool != "deploy" || recent[0].Kind != agent.Approve || recent[0].Channel != "C1" {
		t.Errorf("RecentDecisions(bob) = %+v, %v; want his approval of deploy", recent, err)
	}
	if recent, _ := svc.RecentDecisions(ctx, "U0CAROL", 10); len(recent) != 1 || recent[0].Kind != agent.Reject {
		t.Errorf("RecentDecisions(carol) = %+v, want her rejection", recent)
	}
	var removed, decided []string
	for _, e := range rep.inboxEvents() {
		for _, r := range e.Removed {
			removed = append(removed, r.Tool)
		}
		for _, d := range e.Decided {
			decided = append(decided, d.By+" "+d.Kind.String()+" "+d.Tool)
		}
	}
	slices.Sort(removed)
	slices.Sort(decided)
	if !slices.Equal(removed, []string{"delete", "deploy"}) || !slices.Equal(decided, []string{"U0BOB approve deploy", "U0CAROL reject delete"}) {
		t.Errorf("inbox events removed %v and decided %v; want both calls and both decisions", removed, decided)
	}
}

// Without a way to tell channel members, a call that anyone in the channel
// may decide is decided in the channel, not from an inbox; and it is in
// nobody's inbox.
func TestInboxWithoutMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := inboxWorld(t)
	w.members = nil
	svc, _ := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	del := waitingCall(t, svc, "th", "delete")
	if got, _ := svc.WaitingCalls(ctx, runner.InboxQuery{User: "U0BOB"}); !slices.Equal(toolsOf(got), []string{"deploy"}) {
		t.Errorf("WaitingCalls(bob) = %v, want only deploy, which names him", toolsOf(got))
	}
	d := decision("th", del, agent.Approve, "U0BOB")
	d.Team, d.FromInbox = "T1", true
	var refused *runner.RefusedError
	if err := svc.Decide(ctx, d); !errors.As(err, &refused) || !strings.Contains(refused.Why, "decide it there") {
		t.Errorf("Decide(from the inbox, no membership lookup) = %v, want refused", err)
	}
	if err := svc.Decide(ctx, inChannel(del, agent.Approve, "U0BOB")); err != nil {
		t.Errorf("Decide(in the channel) = %v, want accepted", err)
	}
}

// The inbox is checked against the threads: an entry of a deleted thread
// is dropped from the index, and one of a call that no longer waits in
// that round is not shown.
func TestInboxReconcilesWithThreads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := inboxWorld(t)
	svc, store := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	stale := runner.InboxEntry{Thread: "th", Call: waitingCall(t, svc, "th", "deploy").Key, Round: 3, Tool: "deploy", Requester: "U0ALICE",
		Channel: "C1", Since: time.Now().Add(time.Hour), Approvers: []string{"U0BOB"}}
	gone := runner.InboxEntry{Thread: "gone", Call: "1.0", Tool: "deploy", Channel: "C1", Since: time.Now(), Approvers: []string{"U0BOB"}}
	if err := store.UpdateInbox(ctx, &runner.InboxUpdate{Thread: "gone", Waiting: []runner.InboxEntry{gone}}); err != nil {
		t.Fatal(err)
	}
	entries, _ := store.InboxEntries(ctx)
	u := &runner.InboxUpdate{Thread: "th", Waiting: append(entriesOfThread(entries, "th"), stale)}
	if err := store.UpdateInbox(ctx, u); err != nil {
		t.Fatal(err)
	}
	got, err := svc.WaitingCalls(ctx, runner.InboxQuery{User: "U0BOB"})
	if err != nil || !slices.Equal(toolsOf(got), []string{"delete", "deploy"}) || got[1].Round != 0 {
		t.Errorf("WaitingCalls(bob) = %+v, %v; want deploy (its real round) and delete, not the stale entries", got, err)
	}
	entries, _ = store.InboxEntries(ctx)
	if len(entriesOfThread(entries, "gone")) != 0 {
		t.Errorf("the deleted thread's entry is still indexed: %+v", entries)
	}
}

func entriesOfThread(entries []runner.InboxEntry, thread string) []runner.InboxEntry {
	var out []runner.InboxEntry
	for _, e := range entries {
		if e.Thread == thread {
			out = append(out, e)
		}
	}
	return out
}

// An expired call leaves the inbox, with no decision recorded for anyone.
func TestExpiredCallsLeaveTheInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := inboxWorld(t)
	start := time.Now()
	svc, store := w.serviceAt(t, nil, start)
	startIn(t, svc, "C1", "U0ALICE")
	later, _ := w.serviceAt(t, nil, start.Add(2*time.Hour))
	if n, err := later.ExpireDue(ctx, "th"); err != nil || n != 1 {
		t.Fatalf("ExpireDue() = %d, %v; want delete expired", n, err)
	}
	if got, _ := later.WaitingCalls(ctx, runner.InboxQuery{}); !slices.Equal(toolsOf(got), []string{"deploy"}) {
		t.Errorf("the inbox after delete expired = %v, want only deploy", toolsOf(got))
	}
	if entries, _ := store.InboxEntries(ctx); len(entriesOfThread(entries, "th")) != 1 {
		t.Errorf("the index after delete expired = %+v, want deploy's entry only", entries)
	}
}

// A call that needs two approvals no longer waits for whoever approved
// it: it leaves their inbox and stays in the other approver's until the
// second approval runs it.
func TestInboxOfAQuorum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	w.inbox = true
	w.policy = `
tools:
  lookup: {approval: never}
  deploy: {approvers: [U0BOB, U0CAROL], self_approval: false, approvals_required: 2}
  delete: {approval: never}
`
	svc, _ := w.service(t, &recorder{}, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")
	inbox := func(user string) []string {
		t.Helper()
		got, err := svc.WaitingCalls(ctx, runner.InboxQuery{User: user})
		if err != nil {
			t.Fatal(err)
		}
		return toolsOf(got)
	}
	if got := inbox("U0BOB"); !slices.Equal(got, []string{"deploy"}) {
		t.Fatalf("Bob's inbox before anyone approved = %v, want deploy", got)
	}
	if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0BOB")); err != nil {
		t.Fatal(err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if got := inbox("U0BOB"); len(got) != 0 {
		t.Errorf("Bob's inbox after he approved = %v, want nothing", got)
	}
	if got := inbox("U0CAROL"); !slices.Equal(got, []string{"deploy"}) {
		t.Errorf("Carol's inbox after Bob approved = %v, want deploy", got)
	}
	if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0CAROL")); err != nil {
		t.Fatal(err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if got := inbox("U0CAROL"); len(got) != 0 {
		t.Errorf("Carol's inbox after the second approval = %v, want nothing", got)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
}
