package runner_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/internal/testclock"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// groupsOf answers for user groups from a map.
type groupsOf map[string][]string

func (g groupsOf) InGroup(_ context.Context, group, user string) (bool, error) {
	return slices.Contains(g[group], user), nil
}

// events returns the recorded events of kind.
func (r *recorder) eventsOf(kind runner.EventKind) []runner.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []runner.Event
	for _, e := range r.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// wakeAt is when the store's schedule wakes the thread.
func wakeAt(t *testing.T, w world, thread string) time.Time {
	t.Helper()
	ms, err := w.rdb.ZScore(context.Background(), w.prefix+":wakeups", thread).Result()
	if err != nil {
		t.Fatalf("wake-up of %s: %v", thread, err)
	}
	return time.UnixMilli(int64(ms))
}

// Reminders come from the schedule, once per interval whichever replica
// ticks, at most remind_times, and mention the approvers but not the
// requester, who may not approve their own call.
func TestRemindersFollowTheSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	w.schedule = true
	w.policy = `
tools:
  deploy: {approvers: [U0BOB, U0ALICE, S0OPS], self_approval: false, remind_after: 1h, remind_times: 2, expires_after: 5h}
  lookup: {approval: never}
  delete: {approval: never}
`
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	clk := testclock.New(t0)
	rep := &recorder{}
	svc, _ := w.build(t, rep, time.Second, clk.Now)
	other, _ := w.build(t, rep, time.Second, clk.Now) // a second replica
	startIn(t, svc, "C1", "U0ALICE")

	tests := []struct {
		at       time.Duration
		want     int // reminders so far
		nextWake time.Duration
	}{
		{0, 0, time.Hour},
		{59 * time.Minute, 0, time.Hour},
		{time.Hour, 1, 2 * time.Hour},
		{90 * time.Minute, 1, 2 * time.Hour},
		{3 * time.Hour, 2, 5 * time.Hour}, // the second, late: one, not two
		{4 * time.Hour, 2, 5 * time.Hour}, // no third
	}
	for _, tt := range tests {
		clk.Set(t0.Add(tt.at))
		for _, s := range []*runner.Service{svc, other, svc} {
			if err := s.Tick(ctx, "th"); err != nil {
				t.Fatalf("Tick at +%v = %v", tt.at, err)
			}
		}
		got := rep.eventsOf(runner.Reminder)
		if len(got) != tt.want {
			t.Fatalf("at +%v: %d reminders, want %d", tt.at, len(got), tt.want)
		}
		if wake := wakeAt(t, w, "th"); !wake.Equal(t0.Add(tt.nextWake)) {
			t.Errorf("at +%v: next wake-up at +%v, want +%v", tt.at, wake.Sub(t0), tt.nextWake)
		}
	}
	reminders := rep.eventsOf(runner.Reminder)
	for i, e := range reminders {
		if e.Call.Tool != "deploy" || !slices.Equal(e.People, []string{"U0BOB", "S0OPS"}) || e.Waited != time.Duration(i+1)*time.Hour {
			t.Errorf("reminder %d = %s for %v after %v; want deploy, [U0BOB S0OPS], %v", i+1, e.Call.Tool, e.People, e.Waited, time.Duration(i+1)*time.Hour)
		}
	}
}

// escalatePolicy: only Bob decides deploy, until it has waited 4 hours;
// then the on-call group too.
const escalatePolicy = `
tools:
  deploy: {approvers: [U0BOB], self_approval: false, remind_after: 3h, escalate_after: 4h, escalate_to: S0ONCALL}
  lookup: {approval: never}
  delete: {approval: never}
`

// A member of the escalation group may decide only once the call was
// escalated; the escalation is told once, audited, and later reminders
// mention the group too.
func TestEscalationAddsApprovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	w.schedule = true
	w.policy = escalatePolicy
	w.groups = groupsOf{"S0ONCALL": {"U0DAVE", "U0ALICE"}}
	w.inbox = true
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	clk := testclock.New(t0)
	rep := &recorder{}
	svc, _ := w.build(t, rep, time.Second, clk.Now)
	other, _ := w.build(t, rep, time.Second, clk.Now)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")

	davesInbox := func() []string {
		t.Helper()
		got, err := svc.WaitingCalls(ctx, runner.InboxQuery{User: "U0DAVE"})
		if err != nil {
			t.Fatal(err)
		}
		return toolsOf(got)
	}
	var refused *runner.RefusedError
	if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0DAVE")); !errors.As(err, &refused) {
		t.Fatalf("Decide(on-call member, before escalation) = %v, want a refusal", err)
	}
	if got := davesInbox(); len(got) != 0 {
		t.Errorf("the on-call member's inbox before escalation = %v, want nothing", got)
	}
	clk.Set(t0.Add(3 * time.Hour))
	if err := svc.Tick(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if wake := wakeAt(t, w, "th"); !wake.Equal(t0.Add(4 * time.Hour)) {
		t.Errorf("next wake-up at +%v, want +4h: the escalation", wake.Sub(t0))
	}
	if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0DAVE")); !errors.As(err, &refused) {
		t.Fatalf("Decide(on-call member, 3h in) = %v, want a refusal", err)
	}

	clk.Set(t0.Add(4 * time.Hour))
	for _, s := range []*runner.Service{other, svc} {
		if err := s.Tick(ctx, "th"); err != nil {
			t.Fatal(err)
		}
	}
	escalated := rep.eventsOf(runner.Escalated)
	if len(escalated) != 1 || !slices.Equal(escalated[0].People, []string{"S0ONCALL"}) || escalated[0].Waited != 4*time.Hour {
		t.Fatalf("escalations = %+v, want one, to S0ONCALL after 4h", escalated)
	}
	if got := davesInbox(); !slices.Equal(got, []string{"deploy"}) {
		t.Errorf("the on-call member's inbox after escalation = %v, want deploy", got)
	}
	// Escalation lets the group decide, not everyone, and not the
	// requester, who is in the group but may not approve their own call.
	for _, who := range []string{"U0MALLORY", "U0ALICE"} {
		err := svc.Decide(ctx, inChannel(deploy, agent.Approve, who))
		if !errors.As(err, &refused) {
			t.Fatalf("Decide(%s, after escalation) = %v, want a refusal", who, err)
		}
		if who == "U0MALLORY" && !strings.Contains(refused.Why, "group S0ONCALL") {
			t.Errorf("refusal of %s = %q, want it to name the escalation group", who, refused.Why)
		}
	}
	entries, err := redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix}).AuditEntries(ctx, "", time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	audited := 0
	for _, e := range entries {
		if e.Fields["decision"] == "escalated" && e.Fields["to"] == "S0ONCALL" {
			audited++
		}
	}
	if audited != 1 {
		t.Errorf("%d escalations audited, want 1", audited)
	}

	if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0DAVE")); err != nil {
		t.Fatalf("Decide(on-call member, after escalation) = %v, want nil", err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// A reminder after the escalation mentions the people it added.
func TestReminderAfterEscalation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	w.schedule = true
	w.policy = `
tools:
  deploy: {approvers: [U0BOB], remind_after: 2h, escalate_after: 1h, escalate_to: [S0ONCALL, U0BOB]}
  lookup: {approval: never}
  delete: {approval: never}
`
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	clk := testclock.New(t0)
	rep := &recorder{}
	svc, _ := w.build(t, rep, time.Second, clk.Now)
	startIn(t, svc, "C1", "U0ALICE")
	for _, at := range []time.Duration{time.Hour, 2 * time.Hour} {
		clk.Set(t0.Add(at))
		if err := svc.Tick(ctx, "th"); err != nil {
			t.Fatal(err)
		}
	}
	got := rep.eventsOf(runner.Reminder)
	if len(got) != 1 || !slices.Equal(got[0].People, []string{"U0BOB", "S0ONCALL"}) {
		t.Errorf("reminders = %+v, want one to [U0BOB S0ONCALL]", got)
	}
}

// A decision from a channel that holds a registered copy of the call's
// card counts like one from the thread's channel; from any other channel,
// or from the notify channel before a copy of this call's card was
// recorded there, it is refused.
func TestDecideFromACopyOfTheCard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	w.policy = `
tools:
  deploy: {approvers: [U0BOB], notify: C0NOTIFY, notify_dm: true}
  lookup: {approval: never}
  delete: {approval: required}
`
	rep := &recorder{}
	svc, store := w.service(t, rep, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")
	for _, e := range rep.eventsOf(runner.ApprovalNeeded) {
		switch {
		case e.Call.Tool == "deploy" && (e.Copies == nil || e.Copies.Channel != "C0NOTIFY" || !slices.Equal(e.Copies.DM, []string{"U0BOB"})):
			t.Errorf("deploy's card goes to %+v, want C0NOTIFY and a DM to U0BOB", e.Copies)
		case e.Call.Tool == "delete" && e.Copies != nil:
			t.Errorf("delete's card goes to %+v, want only the thread", e.Copies)
		}
	}

	from := func(channel string) runner.Decision {
		d := inChannel(deploy, agent.Approve, "U0BOB")
		d.Channel = channel
		return d
	}
	var refused *runner.RefusedError
	if err := svc.Decide(ctx, from("C0NOTIFY")); !errors.As(err, &refused) || !strings.Contains(refused.Why, "another channel") {
		t.Fatalf("Decide(from the notify channel, no copy recorded) = %v, want a refusal", err)
	}
	if _, _, err := store.Claim(ctx, "th", runner.CopyKey(deploy.Key, deploy.Attempts, "C0NOTIFY"), []byte("1700000000.000900")); err != nil {
		t.Fatal(err)
	}
	del := waitingCall(t, svc, "th", "delete")
	otherCall := decision("th", del, agent.Approve, "U0BOB")
	otherCall.Team, otherCall.Channel = "T1", "C0NOTIFY"
	otherRound := from("C0NOTIFY")
	otherRound.Round = deploy.Attempts + 1
	for name, d := range map[string]runner.Decision{
		"from another channel":                           from("C0ELSEWHERE"),
		"from no channel":                                from(""),
		"on another call, from the first call's copy":    otherCall,
		"from the notify channel, by someone not listed": func() runner.Decision { d := from("C0NOTIFY"); d.By = "U0MALLORY"; return d }(),
	} {
		if err := svc.Decide(ctx, d); !errors.As(err, &refused) {
			t.Errorf("Decide(%s) = %v, want a refusal", name, err)
		}
	}
	if err := svc.Decide(ctx, otherRound); !errors.Is(err, runner.ErrNotPending) {
		t.Errorf("Decide(a copy of another round) = %v, want ErrNotPending", err)
	}
	if err := svc.Decide(ctx, from("C0NOTIFY")); err != nil {
		t.Fatalf("Decide(from the card's copy) = %v, want nil", err)
	}
	if err := svc.Decide(ctx, inChannel(del, agent.Reject, "U0BOB")); err != nil {
		t.Fatal(err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}
