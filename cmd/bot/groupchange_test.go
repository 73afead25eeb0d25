package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/slacksim/slacktest"
)

// approversGrp is the user group the policy of these tests names as the
// approvers of http_request.
const approversGrp = "S0APPROVERS"

const groupPolicy = `
tools:
  http_request:
    approvers: [S0APPROVERS]
`

// notInGroup is the refusal of a click by someone not in approversGrp.
const notInGroup = "only <!subteam^S0APPROVERS> may approve this call"

// subteamMembersChanged is the event Slack sends when people are added
// to or removed from a user group.
func subteamMembersChanged(group string, added, removed []string) map[string]any {
	return map[string]any{
		"type": "subteam_members_changed", "subteam_id": group, "team_id": slacktest.TeamID,
		"date_previous_update": time.Now().Add(-time.Hour).Unix(), "date_update": time.Now().Unix(),
		"added_users": added, "added_users_count": len(added), "removed_users": removed, "removed_users_count": len(removed),
	}
}

// groupLookups is how many times the bots asked Slack who is in a user
// group.
func (h *harness) groupLookups() int { return len(h.slack.CallsTo("usergroups.users.list")) }

// noDeploy fails the test if the call ran.
func (h *harness) noDeploy(card slacktest.Call, when string) {
	h.t.Helper()
	if n := h.target.Count("POST /deploy"); n != 0 {
		h.t.Fatalf("deploy ran %d times %s", n, when)
	}
	if got := h.card(card); strings.Contains(got, "Approved by") {
		h.t.Fatalf("the card %s: %s", when, got)
	}
}

// deployedOnce waits for the answer after an approval and checks the call
// ran once.
func (h *harness) deployedOnce(root slacktest.Call) {
	h.t.Helper()
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		h.t.Errorf("deploy ran %d times, want 1", n)
	}
}

// Mallory is removed from the approvers group while a call waits. Slack
// tells one replica (A); she clicks Approve on the other (B), which
// remembered the group with her in it: B asks Slack again, refuses her
// and says why; nothing runs. Bob, still in the group, approves: the call
// runs once.
func TestRemovedFromGroupCannotDecideOnAnotherReplica(t *testing.T) {
	// Not in parallel: two replicas, whose timing the other tests' load changes.
	h := newHarness(t, groupPolicy)
	b := h.replica()
	h.slack.SetGroupMembers(approversGrp, approver, mallory)
	root, card := h.deployFlow("Deployed.")

	// B looks the group up for a click it refuses: it now remembers the
	// group with Mallory in it.
	h.clickAt(b, card, "", "approve", carol)
	h.ephemeral(carol, notInGroup)
	before := h.groupLookups()

	h.slack.SetGroupMembers(approversGrp, approver)
	resp := h.event("", subteamMembersChanged(approversGrp, nil, []string{mallory}))
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("the subteam_members_changed event was answered %d %q", resp.StatusCode, body)
	}

	h.clickAt(b, card, "", "approve", mallory)
	h.ephemeral(mallory, notInGroup)
	if n := h.groupLookups(); n <= before {
		t.Errorf("replica B did not ask Slack who is in the group again after the change (%d lookups before, %d after)", before, n)
	}
	h.noDeploy(card, "after a click by someone removed from the group")

	h.clickAt(b, card, "", "approve", approver)
	h.deployedOnce(root)
}

// What a membership event says grants nothing: one whose signature is
// wrong is refused and changes nothing (the group is not even asked
// again), and correctly signed ones that claim Mallory joined the group
// only make the bot ask Slack, which says she is not in it: her click is
// refused, and Bob's approval runs the call once.
func TestMembershipEventsGrantNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, groupPolicy)
	h.slack.SetGroupMembers(approversGrp, approver)
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", mallory)
	h.refused(mallory, 1)
	before := h.groupLookups()

	forged := slacktest.EventCallback("", subteamMembersChanged(approversGrp, []string{mallory}, nil))
	req := slacktest.NewSigner("not-the-signing-secret").Request(http.MethodPost, "http://"+h.addr+"/slack/events", "application/json", forged, time.Now())
	resp, err := botClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an event with a wrong signature was answered %d %q, want 401", resp.StatusCode, body)
	}
	h.click(card, "approve", mallory)
	h.refused(mallory, 2)
	if n := h.groupLookups(); n != before {
		t.Errorf("the group was asked of Slack %d more times after an event with a wrong signature, want 0", n-before)
	}

	clicks := 2
	for _, ev := range []map[string]any{
		subteamMembersChanged(approversGrp, []string{mallory}, nil),
		{"type": "subteam_updated", "subteam": map[string]any{
			"id": approversGrp, "team_id": slacktest.TeamID, "is_usergroup": true, "handle": "approvers",
			"users": []string{approver, mallory}, "user_count": 2,
		}},
	} {
		resp := h.event("", ev)
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("the %s event was answered %d %q", ev["type"], resp.StatusCode, body)
		}
		before := h.groupLookups()
		clicks++
		h.click(card, "approve", mallory)
		h.refused(mallory, clicks)
		if n := h.groupLookups(); n <= before {
			t.Errorf("the bot did not ask Slack who is in the group after a %s event", ev["type"])
		}
		h.noDeploy(card, "after a click by Mallory, whom an event said joined the group")
	}
	h.click(card, "approve", approver)
	h.deployedOnce(root)
	if n := h.refusals(mallory); n != clicks {
		t.Errorf("Mallory was told %d times she may not approve, want %d (one per click)", n, clicks)
	}
}

// refusals is how many times user was told they are not in the group.
func (h *harness) refusals(user string) int {
	n := 0
	for _, c := range h.slack.CallsTo("chat.postEphemeral") {
		if c.User == user && strings.Contains(c.Text, notInGroup) {
			n++
		}
	}
	return n
}

// refused waits until user was told n times they are not in the group.
func (h *harness) refused(user string, n int) {
	h.t.Helper()
	h.eventually(func() bool { return h.refusals(user) >= n }, "%s to be refused %d times", user, n)
}

// Slack does not answer who is in the group once a change was marked:
// a click that depends on it is refused with "try again" — never decided
// on what the replica remembered from before the change — and decided
// once Slack answers again.
func TestGroupLookupFailsAfterAChange(t *testing.T) {
	// Not in parallel: two replicas, whose timing the other tests' load changes.
	h := newHarness(t, groupPolicy)
	b := h.replica()
	h.slack.SetGroupMembers(approversGrp, approver, mallory)
	root, card := h.deployFlow("Deployed.")
	h.clickAt(b, card, "", "approve", carol)
	h.ephemeral(carol, notInGroup)

	h.slack.SetGroupMembers(approversGrp, approver)
	resp := h.event("", subteamMembersChanged(approversGrp, nil, []string{mallory}))
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("the subteam_members_changed event was answered %d %q", resp.StatusCode, body)
	}
	h.slack.FailNext("usergroups.users.list", "internal_error", 1000)
	h.clickAt(b, card, "", "approve", mallory)
	h.ephemeral(mallory, "please try again")
	h.noDeploy(card, "while Slack did not say who is in the group")

	h.slack.FailNext("usergroups.users.list", "", 0) // Slack answers again
	h.clickAt(b, card, "", "approve", mallory)
	h.ephemeral(mallory, notInGroup)
	h.noDeploy(card, "after a click by someone removed from the group")
	h.clickAt(b, card, "", "approve", approver)
	h.deployedOnce(root)
}
