package main

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// The bot removed from a conversation's channel (/remove, a channel
// manager kicking it) or the channel archived, while the conversation
// goes on: Slack refuses what the bot posts there, and sends it
// channel_left (channel_archive, group_left).

// onlyBob is a policy whose calls wait for U0BOB alone.
const onlyBob = "tools:\n  http_request: {approval: required, approvers: [" + approver + "], self_approval: false}\n"

// removedLine is the line the bot logs when it can no longer post in a
// conversation's channel.
const removedLine = "the bot can no longer post in the conversation's channel"

// dms returns the direct messages the bot posted to user.
func (h *harness) dms(user string) []slacktest.Call {
	var out []slacktest.Call
	for _, c := range h.slack.CallsTo("chat.postMessage") {
		if c.OK() && c.Channel == slacktest.DMChannel(user) {
			out = append(out, c)
		}
	}
	return out
}

// dm waits for a direct message to user containing want and returns it.
func (h *harness) dm(user, want string) slacktest.Call {
	h.t.Helper()
	var found slacktest.Call
	h.eventually(func() bool {
		for _, c := range h.dms(user) {
			if strings.Contains(c.Text, want) {
				found = c
				return true
			}
		}
		return false
	}, "a direct message to %s containing %q (got %d)", user, want, len(h.dms(user)))
	return found
}

// left sends the event Slack sends the bot once it is removed from
// channel, signed as Slack signs it.
func (h *harness) left(kind, channel string) {
	h.t.Helper()
	resp := h.event("", map[string]any{"type": kind, "channel": channel, "actor_id": carol, "event_ts": "1700000000.000001"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("%s event answered %d", kind, resp.StatusCode)
	}
}

// lines counts the bot's log lines containing s.
func (h *harness) lines(s string) int { return strings.Count(h.logs.String(), s) }

// The bot is removed while a call waits for approval: the approver still
// has it in the Home tab and decides it there; the call runs once; what
// can no longer be posted in the thread — the card's update, the
// outcome, the answer — reaches the requester once by direct message,
// escaped; the log says so once, and nothing is retried.
func TestRemovedWhileACallWaits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, onlyBob)
	root, card := h.deployFlow("Deployed *v2* to <!here> & <https://evil.example|the docs>.")
	value := buttonValue(t, card, "approve")
	h.openHome(approver)
	h.home(approver, "to list the call", func(v homeView) bool { return len(v.approve) == 1 })

	h.slack.RemoveBot(root.Channel)
	h.left("channel_left", root.Channel)
	h.homeClick(approver, "approve", value)

	answer := h.dm(requester, "Deployed")
	for _, want := range []string{"<#" + root.Channel + ">", "&lt;!here&gt;", "&amp;"} {
		if !strings.Contains(answer.Text, want) {
			t.Errorf("the answer's direct message does not show %q: %q", want, answer.Text)
		}
	}
	if strings.Contains(answer.Text, "<!here>") || strings.Contains(answer.Text, "<https://evil.example") {
		t.Errorf("the answer's direct message carries live markup: %q", answer.Text)
	}
	h.dm(requester, "http_request")
	h.home(approver, "to list nothing", func(v homeView) bool { return len(v.approve) == 0 })
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
	if n := h.lines(removedLine); n != 1 {
		t.Errorf("the log says %d times that the bot can no longer post there, want once", n)
	}
	if n := h.lines(`"msg":"reporting"`); n != 0 {
		t.Errorf("the runner logged %d failures to show events (they are retried): %s", n, h.logs.String())
	}
}

// holdAnswer holds the model's streamed reply to request n before its
// first chunk; it returns a channel closed once the reply is held, and
// the function that lets it go on.
func (h *harness) holdAnswer(n int) (held <-chan struct{}, release func()) {
	arrived, done := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	h.model.OnChunk(func(request, chunk int, _ string) {
		if request == n && chunk == 0 {
			once.Do(func() { close(arrived) })
			<-done
		}
	})
	release = func() { released.Do(func() { close(done) }) }
	h.t.Cleanup(release)
	return arrived, release
}

// wait waits for ch to be closed.
func (h *harness) wait(ch <-chan struct{}, what string) {
	h.t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		h.t.Fatalf("timed out waiting for %s", what)
	}
}

// The bot is removed while the model writes its answer: the requester
// gets the answer by direct message, once. Invited back, the bot works
// there as before: a new request is answered in its thread, streamed with
// Slack's streaming methods (one channel that refuses them is no reason
// to stop using them), and nobody gets a direct message.
func TestRemovedWhileAnswering(t *testing.T) {
	t.Parallel()
	const answer = "Oslo is cloudy today, 4 degrees."
	h := newHarness(t, "", llmtest.Reply(answer), llmtest.Reply("Bergen is rainy."))
	held, release := h.holdAnswer(1)
	h.command("weather in Oslo?", nil, nil)
	root := h.root(1)
	h.wait(held, "the model to start answering")
	h.slack.RemoveBot(root.Channel)
	h.left("channel_left", root.Channel)
	release()

	h.dm(requester, answer)
	if n := len(h.dms(requester)); n != 1 {
		t.Errorf("the requester got %d direct messages, want the answer once", n)
	}
	if n := h.lines(removedLine); n != 1 {
		t.Errorf("the log says %d times that the bot can no longer post there, want once", n)
	}

	h.slack.InviteBot(root.Channel)
	h.command("weather in Bergen?", nil, nil)
	again := h.root(2)
	h.reply(again, "Bergen is rainy.")
	streamed := false
	for _, c := range h.slack.CallsTo("chat.startStream") {
		streamed = streamed || c.OK() && c.ThreadTS == again.TS
	}
	if !streamed {
		t.Errorf("the answer in the new thread was not streamed with chat.startStream")
	}
	if n := len(h.dms(requester)); n != 1 {
		t.Errorf("the requester got %d direct messages, want only the first answer's", n)
	}
	if n := h.lines(`"msg":"reporting"`); n != 0 {
		t.Errorf("the runner logged %d failures to show events (they are retried)", n)
	}
}

// The channel is archived after a call ran, while the model writes the
// answer: the requester gets it by direct message, which says the channel
// was archived. A new request there is told the channel is archived; one
// in a channel the bot was removed from is told to invite it.
func TestArchivedBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, onlyBob)
	held, release := h.holdAnswer(2)
	root, card := h.deployFlow("Deployed v2.")
	h.click(card, "approve", approver)
	h.wait(held, "the model to start the answer")
	h.reply(root, "result") // the call's outcome, shown in the thread before the archive
	h.slack.ArchiveChannel(root.Channel)
	h.left("channel_archive", root.Channel)
	release()

	got := h.dm(requester, "Deployed v2.")
	if !strings.Contains(got.Text, "it was archived") {
		t.Errorf("the direct message does not say the channel was archived: %q", got.Text)
	}
	if n := len(h.dms(requester)); n != 1 {
		t.Errorf("the requester got %d direct messages, want the answer once", n)
	}
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}

	resp := h.command("deploy again", url.Values{"response_url": {h.slack.ResponseURL()}}, nil)
	resp.Body.Close()
	h.responded("This channel is archived")
	h.slack.RemoveBot(slacktest.ChannelID)
	resp = h.command("deploy once more", url.Values{"response_url": {h.slack.ResponseURL()}}, nil)
	resp.Body.Close()
	h.responded("I'm not in this channel")
	if n := len(h.roots()); n != 1 {
		t.Errorf("%d requests were posted, want only the first", n)
	}
}

// responded waits for a message to a response_url containing want.
func (h *harness) responded(want string) {
	h.t.Helper()
	h.eventually(func() bool {
		for _, c := range h.slack.CallsTo("response_url") {
			if strings.Contains(c.Text, want) {
				return true
			}
		}
		return false
	}, "a response containing %q", want)
}

// The bot is removed before it posts a call's card: the requester is told
// by direct message that the call waits for approval; the card's copy in
// the notify channel and the approver's Home tab show it; a click on the
// copy decides it once, the copy shows the decision, and the outcome and
// the answer reach the requester by direct message.
func TestRemovedBeforeTheCard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "tools:\n  http_request:\n    approvers: ["+approver+"]\n    self_approval: false\n    notify: "+notifyCh+"\n")
	held, release := h.holdAnswer(1)
	h.model.Then(
		llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Deployed."),
	)
	h.command("deploy", nil, nil)
	root := h.root(1)
	h.wait(held, "the model to start its reply")
	h.slack.RemoveBot(root.Channel)
	h.left("channel_left", root.Channel)
	release()

	h.dm(requester, "waits for approval")
	cp := h.copyIn(notifyCh)
	h.openHome(approver)
	h.home(approver, "to list the call", func(v homeView) bool { return len(v.approve) == 1 })
	h.clickAt(h.addr, cp, "", "approve", approver)
	h.dm(requester, "Deployed.")
	h.dm(requester, "result")
	h.eventually(func() bool { return strings.Contains(h.card(cp), "Approved by <@"+approver+">") }, "the copy to show the approval")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
	if n := len(h.dms(requester)); n != 3 {
		t.Errorf("the requester got %d direct messages, want 3 (the card, the outcome, the answer)", n)
	}
	if n := h.lines(removedLine); n != 1 {
		t.Errorf("the log says %d times that the bot can no longer post there, want once", n)
	}
}

// Only Slack says the bot left a channel: a channel_left event with a bad
// signature is refused and changes nothing, and a genuine one for another
// channel does not touch this channel's conversation, which goes on in its
// thread.
func TestChannelLeftEventsAreChecked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, onlyBob)
	root, card := h.deployFlow("Deployed.")

	forged := slacktest.NewSigner("not-the-signing-secret").Request(http.MethodPost, "http://"+h.addr+"/slack/events",
		"application/json", slacktest.EventCallback("", map[string]any{"type": "channel_left", "channel": root.Channel}), time.Now())
	resp, err := botClient.Do(forged)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged channel_left event answered %d, want 401", resp.StatusCode)
	}
	h.left("channel_left", "C0OTHER")
	h.eventually(func() bool { return h.leftLogged("C0OTHER") }, "the genuine event to be logged")
	if h.leftLogged(root.Channel) {
		t.Errorf("the forged event was taken for Slack's")
	}

	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	h.eventually(func() bool { return strings.Contains(h.card(card), "Approved by <@"+approver+">") }, "the card to show the approval")
	if n := len(h.dms(requester)); n != 0 {
		t.Errorf("the requester got %d direct messages; the conversation's thread shows everything", n)
	}
	if n := h.lines(removedLine); n != 0 {
		t.Errorf("the bot says it can no longer post in the channel after events it should not heed")
	}
}

// leftLogged reports whether the bot logged that it left channel.
func (h *harness) leftLogged(channel string) bool {
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `"channel":"`+channel+`"`) && strings.Contains(line, "the bot can no longer post in a channel") {
			return true
		}
	}
	return false
}

// The bot is removed while its card waits in a public channel, where the
// card stays and can still be clicked: the click decides, the call runs
// once, and the requester gets the outcome and the answer by direct
// message.
func TestRemovedCardStillClicked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, onlyBob)
	root, card := h.deployFlow("Deployed.")
	h.slack.RemoveBot(root.Channel)
	h.click(card, "approve", approver)
	h.dm(requester, "Deployed.")
	h.dm(requester, "result")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
	if n := len(h.dms(requester)); n != 2 {
		t.Errorf("the requester got %d direct messages, want 2 (the outcome, the answer)", n)
	}
}

// The bot dies while an approved call runs, and is removed from the
// channel before it comes back: the call's outcome is unknown, and its
// card — whose buttons settle it, in the thread only — cannot be posted.
// The requester is told once, by direct message, to invite the bot back;
// invited back, the bot posts the card in the thread.
func TestRemovedWithAnOutcomeUnknown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, onlyBob)
	h.target.HoldNext("POST /deploy")
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", approver)
	h.eventually(func() bool { return h.target.Count("POST /deploy") == 1 }, "the call to be sent")
	h.kill()
	h.slack.RemoveBot(root.Channel)
	h.start()
	// The run is recovered once the dead process's lease has run out and
	// the recovery wake-up comes.
	deadline := time.Now().Add(90 * time.Second)
	const told = "can't tell whether it ran"
	for !h.dmed(requester, told) {
		if time.Now().After(deadline) {
			t.Fatalf("the requester was not told the call's outcome is unknown; direct messages: %d", len(h.dms(requester)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.slack.InviteBot(root.Channel)
	h.cardWith(root, "retry", 90*time.Second)
	n := 0
	for _, c := range h.dms(requester) {
		if strings.Contains(c.Text, told) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the requester was told %d times that the outcome is unknown, want once", n)
	}
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("the call was sent %d times, want 1", n)
	}
}

// dmed reports whether user got a direct message containing want.
func (h *harness) dmed(user, want string) bool {
	for _, c := range h.dms(user) {
		if strings.Contains(c.Text, want) {
			return true
		}
	}
	return false
}

// The bot is removed before a tool's server asks the requester for
// input: the questions go to the requester by direct message, where they
// answer them; the call is sent again once with the answers, and the
// answer reaches them by direct message too.
func TestRemovedBeforeAToolAsks(t *testing.T) {
	t.Parallel()
	rs := newRoomServer(t)
	h := newHarness(t, roomPolicy(rs, "    approval: never\n    expires_after: 24h\n"))
	held, release := h.holdAnswer(1)
	h.model.Then(
		llmtest.Reply("Booking.", llmtest.Call("c1", "rooms__book", `{}`)),
		llmtest.Reply("Booked."),
	)
	h.command("book me a room", nil, nil)
	root := h.root(1)
	h.wait(held, "the model to start its reply")
	h.slack.RemoveBot(root.Channel)
	release()

	var who, room slacktest.Call
	h.eventually(func() bool {
		for _, c := range h.dms(requester) {
			switch {
			case !hasAction(c, "elicit_answer"):
			case strings.Contains(h.card(c), "Booked for whom?"):
				who = c
			default:
				room = c
			}
		}
		return who.TS != "" && room.TS != ""
	}, "the two questions by direct message")
	if !strings.Contains(h.card(who), "I can't post in <#"+root.Channel+"> any more") {
		t.Errorf("the question does not say why it comes by direct message: %s", h.card(who))
	}
	if body := h.answerOn(h.addr, who, requester, "name", "Ada Lovelace"); body != "" {
		t.Fatalf("the first answer was refused: %s", body)
	}
	if body := h.answerOn(h.addr, room, requester, "room", "Lovelace room"); body != "" {
		t.Fatalf("the second answer was refused: %s", body)
	}
	h.dm(requester, "Booked.")
	if _, booked := rs.calls(); len(booked) != 1 || booked[0] != "booked Lovelace room for Ada Lovelace" {
		t.Errorf("bookings = %q, want one with both answers", booked)
	}
	h.eventually(func() bool { return strings.Contains(h.card(who), "Answered by <@"+requester+">") }, "the question to say it was answered")
}
