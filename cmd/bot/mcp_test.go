package main

import (
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/proctest"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// everythingPolicy lists @modelcontextprotocol/server-everything, run
// with npx, whose tools need the approver's approval; rules are added
// under tools:.
func everythingPolicy(t *testing.T, rules string) string {
	t.Helper()
	npx, home := npxForBot(t, "an MCP server from npm")
	env := ""
	if home != "" {
		env = "\n    env: {" + home + "}"
	}
	return `mcp_servers:
  everything:
    command: [` + npx + `, -y, "@modelcontextprotocol/server-everything"]` + env + `
    approvers: [` + approver + `]
tools:
` + rules
}

// npxForBot returns the path of Node's npx, for the bot to run servers
// from npm with, and the HOME entry of their env: (YAML, empty as
// root). A bot that runs as root runs the servers as nobody, in a home
// of its own (where .ci/with-redis fetched them); otherwise they get the
// tests' HOME, with npx's cache, which the bot here has not. what says
// what the test runs, for its skip in the fast tier.
func npxForBot(t *testing.T, what string) (npx, home string) {
	t.Helper()
	needs(t, "Node's npx ("+what+")")
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Fatalf("npx not found (%v): the MCP tests run servers from npm with Node's npx; "+
			"install Node (apt-get install nodejs npm) or run them through `make test`", err)
	}
	if os.Geteuid() != 0 {
		home = "HOME: " + strconv.Quote(os.Getenv("HOME"))
	}
	return npx, home
}

// lastToolResult is what the model was last told of a tool call.
func lastToolResult(t *testing.T, h *harness) string {
	t.Helper()
	reqs := h.model.Requests()
	msgs := reqs[len(reqs)-1].Messages
	if m := msgs[len(msgs)-1]; m.Role == "tool" {
		return m.Text()
	}
	t.Fatalf("the model's last request does not end with a tool result")
	return ""
}

func TestMCPApproveFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, everythingPolicy(t, "  http_request: {}\n"))
	h.model.Then(
		llmtest.Reply("Let me add them.", llmtest.Call("c1", "everything__get-sum", `{"a":2,"b":3}`)),
		llmtest.Reply("2 + 3 = 5."),
	)
	if resp := h.command("what is 2 + 3?", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/agent answered %d", resp.StatusCode)
	}
	root := h.root(1)
	card := h.cards(root, 1)[0]
	for _, want := range []string{"Approval needed: everything__get-sum", "MCP server *everything*", "tool `get-sum`",
		"Returns the sum of two numbers", "Annotations — the server says (not verified): read-only"} {
		if !strings.Contains(h.card(card), want) {
			t.Errorf("card does not show %q: %s", want, h.card(card))
		}
	}
	// The tool is offered to the model with the server's schema.
	var offered bool
	for _, tool := range h.model.Requests()[0].Tools {
		offered = offered || tool.Function.Name == "everything__get-sum"
	}
	if !offered {
		t.Errorf("everything__get-sum was not offered to the model")
	}
	h.click(card, "approve", requester)
	h.ephemeral(requester, "You can't decide this call")
	h.click(card, "approve", approver)
	h.reply(root, "2 + 3 = 5.")
	if got := lastToolResult(t, h); !strings.Contains(got, "5") {
		t.Errorf("the model was told %q; want the server's sum", got)
	}
	if got := h.card(card); !strings.Contains(got, "Approved by <@"+approver+">") {
		t.Errorf("card after approval = %s", got)
	}
	resp, err := botClient.Get("http://" + h.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(body, "mcp everything: up (") {
		t.Errorf("/readyz = %d %q; want ready with the server up", resp.StatusCode, body)
	}
}

func TestMCPEditRejectAndErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, everythingPolicy(t, ""))
	h.model.Then(
		llmtest.Reply("Adding.", llmtest.Call("c1", "everything__get-sum", `{"a":2,"b":3}`)),
		llmtest.Reply("Done adding."),
		llmtest.Reply("Echoing.", llmtest.Call("c2", "everything__echo", `{"message":"hi"}`)),
		llmtest.Reply("Not echoed."),
	)
	h.command("add", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.click(card, "edit", approver)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	resp := h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"args": {"args_input": `{"a":"ten","b":5}`}}})
	if body := readAll(t, resp); !strings.Contains(body, `"response_action":"errors"`) || !strings.Contains(body, "a: must be number") {
		t.Errorf("an edit against the server's schema answered %s; want an inline error", body)
	}
	resp = h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"args": {"args_input": `{"a":10,"b":5}`}}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("edit answered %d", resp.StatusCode)
	}
	h.reply(root, "Done adding.")
	if got := lastToolResult(t, h); !strings.Contains(got, "15") {
		t.Errorf("the model was told %q; want the sum of the edited arguments", got)
	}

	// A reply in the thread is a new turn: the next call is rejected.
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": requester, "text": "now echo hi", "ts": "1700000100.000100", "thread_ts": root.TS})
	card = h.cards(root, 2)[1]
	h.click(card, "reject", approver)
	view = decodeView(t, h.slack.WaitFor(t, "views.open", 2, 10*time.Second)[1])
	h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"reason": {"reason_input": "no echoes today"}}})
	h.reply(root, "Not echoed.")
	if got := lastToolResult(t, h); got != "Rejected by user "+approver+": no echoes today" {
		t.Errorf("the model was told %q; want the rejection", got)
	}
}

func TestMCPElicitationInTheThread(t *testing.T) {
	t.Parallel()
	h := newHarness(t, everythingPolicy(t, "  everything__trigger-elicitation-request: {approval: never}\n"))
	h.model.Then(
		llmtest.Reply("I need your details.", llmtest.Call("c1", "everything__trigger-elicitation-request", `{}`)),
		llmtest.Reply("Thanks, Ada."),
	)
	h.command("sign me up", nil, nil)
	root := h.root(1)
	question := h.reply(root, "asks")
	if !hasAction(question, "elicit_answer") || !hasAction(question, "elicit_decline") || !hasAction(question, "elicit_cancel") {
		t.Fatalf("the request for input has no Answer, Decline and Cancel buttons: %s", question.Blocks)
	}
	if !strings.Contains(h.card(question), "<@"+requester+">") {
		t.Errorf("the request does not name the requester: %s", h.card(question))
	}
	h.click(question, "elicit_answer", approver)
	h.ephemeral(approver, "Only <@"+requester+">")
	h.click(question, "elicit_answer", requester)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	if view.CallbackID != "elicit" {
		t.Fatalf("form = %+v, want the elicitation form", view)
	}
	resp := h.submit(slacktest.Submission{User: requester, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"field:name": {"value": "Ada Lovelace"}}})
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "" {
		t.Fatalf("submitting the form answered %d %q", resp.StatusCode, body)
	}
	h.reply(root, "Thanks, Ada.")
	if got := lastToolResult(t, h); !strings.Contains(got, "Name: Ada Lovelace") {
		t.Errorf("the model was told %q; want the answer", got)
	}
	h.eventually(func() bool { return strings.Contains(h.card(question), "Answered by <@"+requester+">") }, "the request to say who answered")
}

func TestMCPServerKilledMidCall(t *testing.T) {
	// Not in parallel: it kills every server-everything process the test
	// binary started, other tests' among them.
	h := newHarness(t, everythingPolicy(t, ""))
	h.model.Then(
		llmtest.Reply("Running it.", llmtest.Call("c1", "everything__trigger-long-running-operation", `{"duration":300,"steps":300}`)),
		llmtest.Reply("It's done."),
	)
	h.command("run the long job", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.click(card, "approve", approver)
	var pids []int
	// Once the bot has sent the call (it logs that at debug level), the
	// server is killed.
	h.eventually(func() bool {
		pids = proctest.Descendants("server-everything")
		return strings.Contains(h.logs.String(), `"msg":"calling MCP tool"`) && len(pids) > 0
	}, "the call to reach the server")
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// The server says the tool only reads, but the policy does not trust
	// it: the call may have had its effect, and a person is asked.
	var unknown slacktest.Call
	h.eventually(func() bool {
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if hasAction(c, "retry") && hasAction(c, "mark_done") {
				unknown = c
				return true
			}
		}
		return false
	}, "an outcome-unknown card")
	if got := h.card(unknown); !strings.Contains(got, "Outcome unknown: everything__trigger-long-running-operation") {
		t.Errorf("card after the server died = %s; want the outcome-unknown card", got)
	}
	if n := len(h.model.Requests()); n != 1 {
		t.Errorf("the model was asked %d times, want once: the run waits for a person", n)
	}
}

// The offline demo model calls an MCP tool the request names, so MCP can
// be tried without a model: the call waits for approval like any other,
// runs once approved, and its result is summarised.
func TestDemoModelCallsANamedMCPTool(t *testing.T) {
	t.Parallel()
	h := newHarness(t, everythingPolicy(t, ""))
	cmd := exec.Command(botBinary, "chat", "--user", approver, "--thread", "chat-echo")
	cmd.Env = append(append([]string{}, h.env...), "LLM_PROVIDER=demo")
	cmd.Stdin = strings.NewReader("use everything__echo to say hi\na\n")
	out, _ := cmd.CombinedOutput()
	for _, want := range []string{"model: demo", "everything__echo", `"message":"hi"`, "Done: the everything__echo call returned:", "Echo: hi"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("bot chat with the demo model printed:\n%s\nwant %q", out, want)
		}
	}
}
