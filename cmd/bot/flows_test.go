package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/slacksim/slacktest"

	"github.com/countersign/countersign/llm/llmtest"
)

func TestApproveFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("I'll deploy v2.", call("c1", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Deployed v2."),
	)
	if resp := h.command("deploy v2", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/agent answered %d", resp.StatusCode)
	}
	root := h.root(1)
	if root.Text != "<@"+requester+"> asked: deploy v2" {
		t.Errorf("root message = %q", root.Text)
	}
	card := h.cards(root, 1)[0]
	for _, want := range []string{"http_request", "I'll deploy v2.", "<@" + requester + ">", "/deploy"} {
		if !strings.Contains(h.card(card), want) {
			t.Errorf("card does not show %q: %s", want, h.card(card))
		}
	}
	if h.target.Count("POST /deploy") != 0 {
		t.Fatal("the call ran before anyone approved it")
	}
	if resp := h.click(card, "approve", approver); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve answered %d", resp.StatusCode)
	}
	h.reply(root, "Deployed v2.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	if got := h.card(card); !strings.Contains(got, "Approved by <@"+approver+">") || strings.Contains(got, `"action_id"`) {
		t.Errorf("card after approval = %s; want 'Approved by <@%s>' and no buttons", got, approver)
	}
	// The answer is posted before the run logs that it finished.
	h.eventually(func() bool { return strings.Contains(h.logs.String(), `"msg":"run finished"`) }, "the run to log that it finished")
	checkLogs(t, h.logs.String())
}

// checkLogs reads the bot's JSON log lines: runs and tool calls are
// logged with their IDs as fields, and no token, key or secret appears.
func checkLogs(t *testing.T, logs string) {
	t.Helper()
	for _, secret := range []string{botToken, signingSecret, "test-key"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs contain %q", secret)
		}
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("log line is not JSON: %s", line)
			continue
		}
		switch entry["msg"] {
		case "run started", "run paused for approval", "run finished":
			if entry["run"] == nil || entry["thread"] == nil {
				t.Errorf("%q logged without run and thread fields: %s", entry["msg"], line)
			}
		case "tool call done":
			if entry["call"] == nil || entry["tool"] == nil || entry["thread"] == nil {
				t.Errorf("tool call logged without call, tool and thread fields: %s", line)
			}
		}
		seen[fmt.Sprint(entry["msg"])] = true
	}
	for _, msg := range []string{"run paused for approval", "decision claimed", "tool call done", "run finished"} {
		if !seen[msg] {
			t.Errorf("no %q line in the logs", msg)
		}
	}
}

func TestEditFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	h.click(card, "edit", approver)
	views := h.slack.WaitFor(t, "views.open", 1, 10*time.Second)
	view := decodeView(t, views[0])
	if view.CallbackID != "edit_call" || !strings.Contains(view.Input, `"v2"`) {
		t.Fatalf("edit modal = %+v; want edit_call with the arguments", view)
	}
	edited := `{"method":"POST","url":"` + h.target.URL + `/deploy","body":"v3"}`

	// Broken JSON and arguments against the schema are shown in the modal.
	for _, bad := range []string{`{"method":`, `{"method":"POST"}`} {
		resp := h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
			Values: map[string]map[string]string{"args": {"args_input": bad}}})
		body := readAll(t, resp)
		if !strings.Contains(body, `"response_action":"errors"`) || !strings.Contains(body, `"args"`) {
			t.Errorf("submitting %s answered %s; want inline errors on the args input", bad, body)
		}
	}
	resp := h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"args": {"args_input": edited}}})
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "" {
		t.Fatalf("submitting the edit answered %d %q; want an empty 200 that closes the modal", resp.StatusCode, body)
	}
	h.reply(root, "Deployed.")
	if got := h.target.Bodies("POST /deploy"); len(got) != 1 || got[0] != "v3" {
		t.Errorf("deploy received %q, want the edited body once", got)
	}
	if got := h.card(card); !strings.Contains(got, "Edited and approved by <@"+approver+">") || !strings.Contains(got, "v3") {
		t.Errorf("card after edit = %s; want who edited and what changed", got)
	}
}

func TestRejectFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Understood, I won't deploy.")
	h.click(card, "reject", approver)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	if view.CallbackID != "reject_call" {
		t.Fatalf("reject modal = %+v", view)
	}
	resp := h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"reason": {"reason_input": "freeze until Monday"}}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reject submission answered %d", resp.StatusCode)
	}
	h.reply(root, "Understood, I won't deploy.")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Errorf("a rejected call ran %d times", n)
	}
	last := h.model.Requests()[len(h.model.Requests())-1]
	toolMsg := last.Messages[len(last.Messages)-1]
	if toolMsg.Role != "tool" || toolMsg.Text() != "Rejected by user "+approver+": freeze until Monday" {
		t.Errorf("the model was told %s %q; want the rejection and its reason", toolMsg.Role, toolMsg.Text())
	}
	if got := h.card(card); !strings.Contains(got, "Rejected by <@"+approver+">") || !strings.Contains(got, "freeze until Monday") {
		t.Errorf("card after rejection = %s", got)
	}
}

func TestTenConcurrentApprovals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := h.click(card, "approve", fmt.Sprintf("U0CLICK%d", i))
			if resp.StatusCode != http.StatusOK {
				t.Errorf("click %d answered %d", i, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	// The card shows the approval once, before the outcome: with the
	// call's start, which the save that claimed the click precedes.
	approvals := 0
	for _, c := range h.slack.CallsTo("chat.update") {
		if c.TS == card.TS && strings.Contains(c.Text+string(c.Blocks), "Approved by") && !strings.Contains(string(c.Blocks), "Done") {
			approvals++
		}
	}
	if approvals != 1 {
		t.Errorf("the card was updated with an approval %d times before the outcome, want 1", approvals)
	}
	h.eventually(func() bool {
		n := 0
		for _, c := range h.slack.CallsTo("chat.postEphemeral") {
			if strings.Contains(c.Text, "Already approved by <@U0CLICK") {
				n++
			}
		}
		return n == 9
	}, "nine ephemeral 'Already approved by' answers")
}

func TestRetriedSlashCommandStartsOneRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Hello!"))
	form := url.Values{"trigger_id": {"trigger.retried"}}
	for i, retry := range []string{"", "1", "2"} {
		header := http.Header{}
		if retry != "" {
			header.Set("X-Slack-Retry-Num", retry)
			header.Set("X-Slack-Retry-Reason", "http_timeout")
		}
		if resp := h.command("say hello", form, header); resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery %d answered %d", i, resp.StatusCode)
		}
	}
	root := h.root(1)
	h.reply(root, "Hello!")
	h.quiet() // a second run would have started by now
	roots := 0
	for _, c := range h.slack.CallsTo("chat.postMessage") {
		if strings.Contains(c.Text, "asked:") {
			roots++
		}
	}
	if roots != 1 || len(h.model.Requests()) != 1 {
		t.Errorf("three deliveries made %d root messages and %d model calls, want 1 and 1", roots, len(h.model.Requests()))
	}
}

// After an approve flow, /metrics shows it.
func TestMetricsMoveAfterAFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	// Every series a dashboard sums is there from the start, at zero.
	for _, sample := range []string{`countersign_runs_started_total`, `countersign_runs_stopped_total{status="failed"}`,
		`countersign_decisions_total{kind="reject"}`, `countersign_tool_executions_total{outcome="failed",tool="http_request"}`,
		`countersign_model_call_seconds_count{outcome="error"}`} {
		if got := scrape(t, h, sample); got != "0" {
			t.Errorf("before any request, %s = %q, want 0", sample, got)
		}
	}
	resp, err := botClient.Get("http://" + h.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if all := readAll(t, resp); !regexp.MustCompile(`(?m)^countersign_build_info\{goversion="` + regexp.QuoteMeta(runtime.Version()) + `",revision="[^"]+",version="devel"\} 1$`).MatchString(all) {
		t.Errorf("no countersign_build_info 1 with the build's Go version and version devel in /metrics")
	}
	h.model.ReportUsage(120, 30)
	root, card := h.deployFlow("Deployed.")
	// The card is shown first, then recorded as waiting: wait for the
	// record rather than reading the gauge the moment the card appears.
	h.eventually(func() bool { return scrape(t, h, "countersign_pending_approvals") == "1" }, "one pending approval in /metrics while the card waits")
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	tests := []struct{ metric, want string }{
		{`countersign_runs_started_total`, "1"},
		{`countersign_runs_resumed_total`, "1"},
		{`countersign_runs_stopped_total{status="paused"}`, "1"},
		{`countersign_runs_stopped_total{status="done"}`, "1"},
		{`countersign_decisions_total{kind="approve"}`, "1"},
		{`countersign_approval_wait_seconds_count`, "1"},
		{`countersign_model_call_seconds_count{outcome="ok"}`, "2"},
		{`countersign_model_tokens_total{kind="input"}`, "240"},
		{`countersign_model_tokens_total{kind="output"}`, "60"},
		{`countersign_tool_executions_total{outcome="done",tool="http_request"}`, "1"},
		{`countersign_slack_ack_seconds_count{endpoint="/slack/commands"}`, "1"},
		{`countersign_slack_ack_seconds_count{endpoint="/slack/interactions"}`, "1"},
	}
	// A count of the waiting calls stands for 5 s: the one taken while
	// the card waited may still be the gauge's.
	h.eventually(func() bool { return scrape(t, h, "countersign_pending_approvals") == "0" }, "no pending approval in /metrics once the call is decided")
	for _, tt := range tests {
		if got := scrape(t, h, tt.metric); got != tt.want {
			t.Errorf("%s = %q, want %s", tt.metric, got, tt.want)
		}
	}
	if got := scrape(t, h, "countersign_checkpoint_save_seconds_count"); got == "" || got == "0" {
		t.Errorf("checkpoint saves counted: %q, want some", got)
	}
	// What the flow cost Redis, by operation.
	for _, op := range []string{"save", "claim", "lease", "intake"} {
		for _, sample := range []string{`countersign_redis_commands_total{op="` + op + `"}`, `countersign_redis_round_trips_total{op="` + op + `"}`,
			`countersign_redis_bytes_total{direction="sent",op="` + op + `"}`, `countersign_redis_bytes_total{direction="received",op="` + op + `"}`} {
			if got := scrape(t, h, sample); got == "" || got == "0" {
				t.Errorf("%s = %q after a flow, want more than 0", sample, got)
			}
		}
	}
}

// scrape returns the value of one sample of /metrics, or "".
func scrape(t *testing.T, h *harness, sample string) string {
	t.Helper()
	resp, err := botClient.Get("http://" + h.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(readAll(t, resp), "\n") {
		if name, value, ok := strings.Cut(line, " "); ok && name == sample {
			return value
		}
	}
	return ""
}
