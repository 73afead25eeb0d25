package slackdir_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/internal/testclock"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/slackdir"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// settles is more than the time Slack's API is given to catch up with a
// change it sent the event of.
const settles = 31 * time.Second

// replicas returns two lookups, as two replicas of the bot have, that
// share their change marks in one Redis, and the Slack they ask; their
// clock (which the marks' times, from the real one, start beside).
func replicas(t *testing.T) (a, b *slackdir.Groups, web *slacktest.Server, now *testclock.Clock) {
	t.Helper()
	web = slacktest.NewServer(t)
	store := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: "slackdir-" + time.Now().Format("150405.000000000")})
	api := slack.New("xoxb-test", slack.OptionAPIURL(web.URL()))
	now = testclock.New(time.Now())
	a, b = slackdir.NewGroups(api, 0, now.Now), slackdir.NewGroups(api, 0, now.Now)
	a.SetMarks(store)
	b.SetMarks(store)
	return a, b, web, now
}

// A change Slack told replica A of reaches replica B: B's checks of the
// group ask Slack again, and answer what Slack says; once Slack's API has
// had time to catch up with the change, B answers from memory again, as
// it does without a change.
func TestGroupChangeReachesTheOtherReplica(t *testing.T) {
	ctx := context.Background()
	a, b, web, now := replicas(t)
	lookups := func() int { return len(web.CallsTo("usergroups.users.list")) }
	web.SetGroupMembers("S1", "U1", "U2")
	in := func(user string) bool {
		t.Helper()
		ok, err := b.InGroup(ctx, "S1", user)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !in("U2") || lookups() != 1 {
		t.Fatalf("U2 in S1 = false or %d lookups; want true after 1", lookups())
	}
	web.SetGroupMembers("S1", "U1")
	if ok := in("U2"); !ok || lookups() != 1 {
		t.Fatalf("with no change marked: U2 in S1 = %v after %d lookups; want what B remembered (true), after 1", ok, lookups())
	}
	if first, err := a.Changed(ctx, "Ev1", []string{"S1"}, nil); err != nil || !first {
		t.Fatalf("Changed = %v, %v; want true, nil", first, err)
	}
	if in("U2") {
		t.Fatal("U2, removed from S1, is still in it for B after the change was marked")
	}
	if !in("U1") || lookups() != 3 {
		t.Errorf("just after the change: U1 in S1 = false or %d lookups; want true after 3 (Slack asked each time)", lookups())
	}
	now.Add(settles)
	for range 2 {
		if !in("U1") {
			t.Fatal("once the change settled: U1 is not in S1")
		}
	}
	if lookups() != 4 {
		t.Errorf("once the change settled: %d lookups; want 4 (asked once more, then remembered)", lookups())
	}
	// A repeated delivery of the event changes nothing.
	if first, err := a.Changed(ctx, "Ev1", []string{"S1"}, nil); err != nil || first {
		t.Fatalf("Changed(again) = %v, %v; want false, nil", first, err)
	}
	in("U1")
	if lookups() != 4 {
		t.Errorf("a repeated event made B ask Slack again (%d lookups, want 4)", lookups())
	}
}

// Slack sends a change's event as it makes the change, and its API may
// answer what was true before for a few seconds. What B fetched then is
// not what decides: its next check asks Slack again, and Bob, removed from
// the group, cannot approve once Slack's API says so.
func TestAnswerFetchedAsAChangeIsMadeIsAskedAgain(t *testing.T) {
	ctx := context.Background()
	a, b, web, _ := replicas(t)
	web.SetGroupMembers("S1", "U0ALICE", "U0BOB")
	if ok, err := b.InGroup(ctx, "S1", "U0BOB"); err != nil || !ok {
		t.Fatalf("Bob in S1 = %v, %v; want true", ok, err)
	}
	if _, err := a.Changed(ctx, "Ev1", []string{"S1"}, nil); err != nil {
		t.Fatal(err)
	}
	// Slack's API does not show Bob's removal yet.
	if ok, err := b.InGroup(ctx, "S1", "U0BOB"); err != nil || !ok {
		t.Fatalf("Bob in S1, Slack behind its event = %v, %v; want true (what Slack says)", ok, err)
	}
	web.SetGroupMembers("S1", "U0ALICE")
	if ok, err := b.InGroup(ctx, "S1", "U0BOB"); err != nil || ok {
		t.Errorf("Bob in S1 once Slack shows his removal = %v, %v; want false", ok, err)
	}
}

// The same for a channel's members (the check of a decision made from the
// Home tab on a call anyone in its channel may decide).
func TestChannelChangeReachesTheOtherReplica(t *testing.T) {
	ctx := context.Background()
	a, b, web, _ := replicas(t)
	web.SetChannelMembers("C1", "U1", "U2")
	if ok, err := b.InChannel(ctx, "C1", "U2"); err != nil || !ok {
		t.Fatalf("U2 in C1 = %v, %v; want true", ok, err)
	}
	web.SetChannelMembers("C1", "U1")
	if _, err := a.Changed(ctx, "Ev1", nil, []string{"C1"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.InChannel(ctx, "C1", "U2"); err != nil || ok {
		t.Errorf("U2, who left C1, in C1 = %v, %v for B after the change; want false", ok, err)
	}
	// What only shows whom a call waits for may come from memory: it
	// does not ask Slack again.
	n := len(web.CallsTo("conversations.members"))
	if ok, err := b.InChannelRemembered(ctx, "C1", "U1"); err != nil || !ok {
		t.Errorf("InChannelRemembered(U1) = %v, %v; want true", ok, err)
	}
	if m := len(web.CallsTo("conversations.members")); m != n {
		t.Errorf("InChannelRemembered asked Slack (%d calls, want %d)", m, n)
	}
}

// When the group changed and Slack does not answer, or the mark cannot be
// read, the check fails rather than answer what was remembered before the
// change; it answers again once Slack does.
func TestChangedGroupIsNotAnsweredFromMemory(t *testing.T) {
	ctx := context.Background()
	a, b, web, _ := replicas(t)
	web.SetGroupMembers("S1", "U1", "U2")
	if ok, err := b.InGroup(ctx, "S1", "U2"); err != nil || !ok {
		t.Fatalf("U2 in S1 = %v, %v; want true", ok, err)
	}
	web.SetGroupMembers("S1", "U1")
	if _, err := a.Changed(ctx, "Ev1", []string{"S1"}, nil); err != nil {
		t.Fatal(err)
	}
	web.FailNext("usergroups.users.list", "internal_error", 1)
	if ok, err := b.InGroup(ctx, "S1", "U2"); err == nil {
		t.Fatalf("InGroup with Slack failing after a change = %v, nil; want an error", ok)
	}
	if ok, err := b.InGroup(ctx, "S1", "U2"); err != nil || ok {
		t.Errorf("InGroup once Slack answers = %v, %v; want false, nil", ok, err)
	}

	// A Redis that does not answer: the mark cannot be read.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { down.Close() })
	c := slackdir.NewGroups(slack.New("xoxb-test", slack.OptionAPIURL(web.URL())), 0, nil)
	c.SetMarks(redisstore.New(down, redisstore.Options{}))
	if ok, err := c.InGroup(ctx, "S1", "U1"); err == nil {
		t.Errorf("InGroup without the marks = %v, nil; want an error", ok)
	}
	if ok, err := c.InGroupRemembered(ctx, "S1", "U1"); err != nil || !ok {
		t.Errorf("InGroupRemembered without the marks = %v, %v; want true, nil (it reads none)", ok, err)
	}
	if _, err := c.Changed(ctx, "Ev2", []string{"S1"}, nil); err == nil {
		t.Error("Changed without Redis = nil error, want one (Slack must deliver the event again)")
	}
}
