package runner_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// An error while checking a rule is never an answer: the look-up's error
// is a "try again" — nothing decided, nothing audited as a refusal —
// and, once the look-up works again, the same request is decided by the
// rule. Each test below injects the error of one look-up.

var errLookup = errors.New("connection refused")

// flakyGroups answers for user groups, or fails while fail is set.
type flakyGroups struct {
	members map[string][]string
	fail    *atomic.Bool
}

func (g flakyGroups) InGroup(_ context.Context, group, user string) (bool, error) {
	if g.fail.Load() {
		return false, errLookup
	}
	for _, u := range g.members[group] {
		if u == user {
			return true, nil
		}
	}
	return false, nil
}

// flakyMembers answers for channel membership, or fails while fail is set.
type flakyMembers struct {
	channelMembers
	fail *atomic.Bool
}

func (m *flakyMembers) InChannel(ctx context.Context, channel, user string) (bool, error) {
	if m.fail.Load() {
		return false, errLookup
	}
	return m.channelMembers.InChannel(ctx, channel, user)
}

// flakyClaims is the store whose reads of a thread's claims fail while
// fail is set, as while the thread's Redis master fails over.
type flakyClaims struct {
	*redisstore.Store
	fail *atomic.Bool
}

func (f flakyClaims) ClaimValues(ctx context.Context, thread string, keys []string) (map[string][]byte, error) {
	if f.fail.Load() {
		return nil, errLookup
	}
	return f.Store.ClaimValues(ctx, thread, keys)
}

// tryAgain asserts that err is a refusal that asks to try again.
func tryAgain(t *testing.T, what string, err error) {
	t.Helper()
	var refused *runner.RefusedError
	if !errors.As(err, &refused) || !refused.TryAgain || refused.Noted {
		t.Fatalf("%s during a look-up error = %v; want a \"try again\"", what, err)
	}
}

const groupsYAML = `
tools:
  lookup: {approval: never}
  deploy: {approval: required, approvers: [S0OPS], self_approval: false}
  delete: {approval: required, approvers: [S0OPS], self_approval: false}
`

// A user-group look-up fails: an approval is "try again", not "only S0OPS
// may approve"; a thread reply rejects nothing and is not kept as a note
// (the front end keeps it due); a Retry is "try again". None is audited.
func TestGroupLookupErrorIsNoAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := policyWorld(t)
	w.policy = groupsYAML
	var fail atomic.Bool
	w.groups = flakyGroups{members: map[string][]string{"S0OPS": {"U0BOB"}}, fail: &fail}
	svc, _ := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")

	fail.Store(true)
	tryAgain(t, "Decide(approve)", svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0BOB")))
	tryAgain(t, "Reply", svc.Reply(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0BOB", Text: "not today"}))
	if n := refusals(t, w); n != 0 {
		t.Errorf("%d refusals audited for look-ups that failed; want none", n)
	}
	for _, e := range trail(t, w) {
		if strings.HasSuffix(e, "noted") || strings.Contains(e, "decision deploy") {
			t.Errorf("trail has %q after look-ups that failed; want nothing decided or noted", e)
		}
	}
	res, err := svc.State(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.State.Notes) != 0 || len(res.State.Waiting()) != 2 {
		t.Fatalf("after the look-ups failed: notes %v, %d calls waiting; want no note, both waiting", res.State.Notes, len(res.State.Waiting()))
	}

	fail.Store(false)
	if err := svc.Reply(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0BOB", Text: "not today"}); err != nil {
		t.Fatalf("Reply once the look-up works = %v", err)
	}
	if n := tg.Count("POST /deploy"); n != 0 {
		t.Errorf("deploy ran %d times; the reply rejected it", n)
	}
	if res, _ := svc.State(ctx, "th"); len(res.State.Waiting()) != 0 {
		t.Errorf("%d calls still wait after the reply", len(res.State.Waiting()))
	}
}

// A decision from a copy of the card (a notify channel) while the
// thread's claims cannot be read: "try again", not "this card belongs to
// another channel".
func TestCopyLookupErrorIsNoAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := policyWorld(t)
	var fail atomic.Bool
	w.leases = func(s *redisstore.Store) runner.Store { return flakyClaims{s, &fail} }
	svc, store := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")
	if _, _, err := store.Claim(ctx, "th", runner.CopyKey(deploy.Key, deploy.Attempts, "C9"), []byte("1.2")); err != nil {
		t.Fatal(err)
	}
	fromCopy := inChannel(deploy, agent.Approve, "U0BOB")
	fromCopy.Channel = "C9"

	fail.Store(true)
	tryAgain(t, "Decide(from a copy)", svc.Decide(ctx, fromCopy))
	if n := refusals(t, w); n != 0 {
		t.Errorf("%d refusals audited for a look-up that failed; want none", n)
	}
	fail.Store(false)
	if err := svc.Decide(ctx, fromCopy); err != nil {
		t.Fatalf("Decide(from a copy) once the look-up works = %v", err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
}

// A channel-membership look-up fails: a decision from the inbox is "try
// again" (not audited), and the inbox is an error, not a list without the
// calls the look-up could not place.
func TestMembershipLookupErrorIsNoAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := inboxWorld(t)
	var fail atomic.Bool
	w.members = &flakyMembers{channelMembers: channelMembers{people: map[string][]string{"C1": {"U0ALICE", "U0BOB", "U0CAROL"}}}, fail: &fail}
	svc, _ := w.service(t, nil, time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	del := waitingCall(t, svc, "th", "delete")
	fromInbox := decision("th", del, agent.Approve, "U0CAROL")
	fromInbox.Team, fromInbox.FromInbox = "T1", true

	fail.Store(true)
	tryAgain(t, "Decide(from the inbox)", svc.Decide(ctx, fromInbox))
	if n := refusals(t, w); n != 0 {
		t.Errorf("%d refusals audited for a look-up that failed; want none", n)
	}
	if got, err := svc.WaitingCalls(ctx, runner.InboxQuery{User: "U0CAROL"}); err == nil {
		t.Errorf("WaitingCalls during a look-up error = %v, nil; want an error, not a list without delete", toolsOf(got))
	}
	fail.Store(false)
	if got, err := svc.WaitingCalls(ctx, runner.InboxQuery{User: "U0CAROL"}); err != nil || len(got) != 1 {
		t.Errorf("WaitingCalls = %v, %v; want delete", toolsOf(got), err)
	}
	if err := svc.Decide(ctx, fromInbox); err != nil {
		t.Fatalf("Decide(from the inbox) once the look-up works = %v", err)
	}
}
