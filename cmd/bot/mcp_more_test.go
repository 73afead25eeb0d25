package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// serverStart bounds the wait for what comes after server-everything's
// start, the first time a process needs it: npx is slow on a busy
// machine, the more so under the race detector.
const serverStart = 90 * time.Second

// server-everything's simulate-research-query runs only as a task, which
// the client cannot do: it is not offered, so no card is ever shown for a
// call that would fail, and `bot tools` and /readyz say why it is missing.
func TestMCPTaskOnlyToolIsNotOffered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, everythingPolicy(t, ""))
	h.model.Then(llmtest.Reply("Adding.", llmtest.Call("c1", "everything__get-sum", `{"a":1,"b":1}`)))
	h.command("add", nil, nil)
	h.cardWith(h.root(1), "approve", serverStart)
	offered := map[string]bool{}
	for _, tool := range h.model.Requests()[0].Tools {
		offered[tool.Function.Name] = true
	}
	if !offered["everything__get-sum"] || offered["everything__simulate-research-query"] {
		t.Errorf("offered %v; want get-sum but not the task-only simulate-research-query", offered)
	}
	const why = "runs only as a task (execution.taskSupport: required)"
	var readyz string
	h.eventually(func() bool {
		resp, err := botClient.Get("http://" + h.addr + "/readyz")
		if err != nil {
			return false
		}
		readyz = readAll(t, resp)
		return strings.Contains(readyz, "left out \"simulate-research-query\": it "+why)
	}, "/readyz to say the task-only tool is left out")
	out, code := runBot(t, h.env, "", "tools")
	if code != 0 {
		t.Fatalf("bot tools exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "MCP server everything lists these tools, which are not offered:\n  simulate-research-query: it "+why) {
		t.Errorf("bot tools does not say why simulate-research-query is missing:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "everything__simulate-research-query") {
			t.Errorf("bot tools lists the task-only tool as offered: %s", line)
		}
	}
}

// A long call's progress is shown while it runs, and each progress
// notification gives the call more time: the server's timeout is 4s, the
// call takes 8 and reports progress every second, and it finishes with
// its result. Where answers stream with Slack's streaming methods the
// progress is a task in a streamed message of the thread, in progress
// then complete, and the card shows no progress line; where they do not,
// the line is on the card.
func TestMCPProgressOnTheCardAndItExtendsTheTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
		task bool
	}{
		{"streamed: a task", nil, true},
		{"not streamed: the card", []string{"SLACK_STREAMING=off"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			policy := strings.Replace(everythingPolicy(t, ""), "    approvers:", "    timeout: 4s\n    approvers:", 1)
			h := newHarness(t, policy)
			if len(tt.env) > 0 {
				h.restartWith(tt.env...)
			}
			h.model.Then(
				llmtest.Reply("Running it.", llmtest.Call("c1", "everything__trigger-long-running-operation", `{"duration":8,"steps":8}`)),
				llmtest.Reply("It's done."),
			)
			h.command("run the long job", nil, nil)
			root := h.root(1)
			card := h.cardWith(root, "approve", serverStart)
			h.click(card, "approve", approver)
			progressOnCard := func() bool {
				for _, c := range h.slack.CallsTo("chat.update") {
					if c.TS == card.TS && strings.Contains(string(c.Blocks), "Progress: ") && strings.Contains(string(c.Blocks), " of 8 (") {
						return true
					}
				}
				return false
			}
			var task slacktest.Call
			if tt.task {
				h.eventually(func() bool {
					for _, c := range h.slack.CallsTo("chat.startStream") {
						tasks := h.slack.Tasks(c.Channel, c.TS)
						if c.OK() && c.ThreadTS == root.TS && len(tasks) > 0 && strings.Contains(tasks[len(tasks)-1].Details, " of 8 (") {
							task = c
							return true
						}
					}
					return false
				}, "the call's progress as a task in a streamed message")
			} else {
				h.eventually(progressOnCard, "the card to show the call's progress")
			}
			h.reply(root, "It's done.")
			if got := lastToolResult(t, h); !strings.Contains(got, "Long running operation completed") {
				t.Errorf("the model was told %q; want the result of the call, which outlived the server's timeout with progress", got)
			}
			h.eventually(func() bool { return strings.Contains(h.card(card), "Done") }, "the card to show the call done")
			if got := h.card(card); strings.Contains(got, "Progress: ") {
				t.Errorf("the finished card still shows progress: %s", got)
			}
			if !tt.task {
				for _, c := range h.slack.CallsTo("chat.startStream") {
					if len(h.slack.Tasks(c.Channel, c.TS)) > 0 {
						t.Errorf("a task was streamed where answers do not stream")
					}
				}
				return
			}
			if progressOnCard() {
				t.Error("the card showed a progress line while the task showed it")
			}
			h.eventually(func() bool { return !h.slack.Streaming(task.Channel, task.TS) }, "the task's stream to be stopped")
			tasks := h.slack.Tasks(task.Channel, task.TS)
			if last := tasks[len(tasks)-1]; last.Status != "complete" || last.Title != "Running everything__trigger-long-running-operation" {
				t.Errorf("the task ended as %+v; want the call complete", last)
			}
			for _, u := range tasks[:len(tasks)-1] {
				if u.Status != "in_progress" || u.ID != tasks[0].ID {
					t.Errorf("task updates %+v; want one task in progress until it completes", tasks)
					break
				}
			}
			if len(tasks) < 3 {
				t.Errorf("%d task updates for 8 steps of a second, want the progress shown as it went", len(tasks))
			}
		})
	}
}

// A server's log notifications go to the bot's log, with the server's
// name and level, and never to the model.
func TestMCPServerLogsGoToTheLogNotTheModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, everythingPolicy(t, "  everything__toggle-simulated-logging: {approval: never}\n"))
	h.model.Then(
		llmtest.Reply("Turning logs on.", llmtest.Call("c1", "everything__toggle-simulated-logging", `{}`)),
		llmtest.Reply("Logging is on."),
	)
	h.command("turn on the logs", nil, nil)
	root := h.root(1)
	h.eventually(func() bool {
		for _, line := range strings.Split(h.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"MCP server log"`) && strings.Contains(line, `"mcp_server":"everything"`) &&
				strings.Contains(line, `"server_level":"`) && (strings.Contains(line, "level message") || strings.Contains(line, "level-message")) {
				return true
			}
		}
		return false
	}, "the server's log message in the bot's log")
	h.reply(root, "Logging is on.")
	for _, r := range h.model.Requests() {
		for _, m := range r.Messages {
			if text := m.Text(); strings.Contains(text, "level message") || strings.Contains(text, "level-message") {
				t.Errorf("the model was shown a server's log message: %q", text)
			}
		}
	}
}

// A result links to a resource; the model reads it through the server's
// read tool, which waits for approval like the server's other tools and
// then gives the model the resource's text.
func TestMCPReadALinkedResource(t *testing.T) {
	t.Parallel()
	h := newHarness(t, everythingPolicy(t, "  everything__get-resource-links: {approval: never}\n"))
	const uri = "demo://resource/dynamic/text/2"
	h.model.Then(
		llmtest.Reply("Listing.", llmtest.Call("c1", "everything__get-resource-links", `{"count":2}`)),
		llmtest.Reply("Reading the text one.", llmtest.Call("c2", "everything__read_resource", `{"uri":"`+uri+`"}`)),
		llmtest.Reply("It says it is a plaintext resource."),
	)
	h.command("what does the text resource say?", nil, nil)
	root := h.root(1)
	card := h.cardWith(root, "approve", serverStart)
	// The model was told of the link and of the tool that reads it.
	link := h.model.Requests()[1].Messages
	if got, want := link[len(link)-1].Text(), "[resource link "+uri+` "Text Resource 2"; read it with everything__read_resource]`; !strings.Contains(got, want) {
		t.Errorf("the model was told %q; want the link and the read tool (%s)", got, want)
	}
	if got := h.card(card); !strings.Contains(got, "Approval needed: everything__read_resource") || !strings.Contains(got, uri) {
		t.Errorf("the read's card = %s; want the read tool and the URI", got)
	}
	h.click(card, "approve", approver)
	h.reply(root, "It says it is a plaintext resource.")
	if got := lastToolResult(t, h); !strings.Contains(got, "Resource 2: This is a plaintext resource") {
		t.Errorf("the model was told %q; want the resource's text", got)
	}
}

// server-everything asks for every kind of input: the form shows its
// fields in the server's order (not sorted by name), each with the input
// of its type, and the typed answers reach the server.
func TestMCPElicitationFormKeepsTheServersOrderAndTypes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, everythingPolicy(t, "  everything__trigger-elicitation-request: {approval: never}\n"))
	h.model.Then(
		llmtest.Reply("I need your details.", llmtest.Call("c1", "everything__trigger-elicitation-request", `{}`)),
		llmtest.Reply("Thanks, Ada."),
	)
	h.command("sign me up", nil, nil)
	root := h.root(1)
	question := h.cardWith(root, "elicit_answer", serverStart)
	h.click(question, "elicit_answer", requester)
	opened := h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0]
	var view struct {
		Blocks []struct {
			BlockID string `json:"block_id"`
			Element struct {
				Type string `json:"type"`
			} `json:"element"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal([]byte(opened.Params["view"]), &view); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range view.Blocks {
		if name, ok := strings.CutPrefix(b.BlockID, "field:"); ok {
			got = append(got, name+"="+b.Element.Type)
		}
	}
	want := []string{"name=plain_text_input", "check=checkboxes", "firstLine=plain_text_input", "email=plain_text_input",
		"homepage=plain_text_input", "birthdate=datepicker", "integer=number_input", "number=number_input",
		"untitledSingleSelectEnum=static_select", "untitledMultipleSelectEnum=multi_static_select",
		"titledSingleSelectEnum=static_select", "titledMultipleSelectEnum=multi_static_select", "legacyTitledEnum=static_select"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the form's fields are\n%v\nwant the server's order and an input of each type\n%v", got, want)
	}
	meta := decodeView(t, opened)
	option := func(v string) map[string]any {
		return map[string]any{"value": v, "text": map[string]any{"type": "plain_text", "text": v}}
	}
	resp := h.submit(slacktest.Submission{User: requester, CallbackID: meta.CallbackID, PrivateMetadata: meta.PrivateMetadata,
		Values: map[string]map[string]string{"field:name": {"value": "Ada Lovelace"}},
		State: map[string]map[string]any{
			"field:check":                      {"value": map[string]any{"type": "checkboxes", "selected_options": []any{option("true")}}},
			"field:birthdate":                  {"value": map[string]any{"type": "datepicker", "selected_date": "1815-12-10"}},
			"field:integer":                    {"value": map[string]any{"type": "number_input", "value": "7"}},
			"field:untitledSingleSelectEnum":   {"value": map[string]any{"type": "static_select", "selected_option": option("Joey")}},
			"field:untitledMultipleSelectEnum": {"value": map[string]any{"type": "multi_static_select", "selected_options": []any{option("Piano"), option("Drums")}}},
			"field:titledMultipleSelectEnum":   {"value": map[string]any{"type": "multi_static_select", "selected_options": []any{option("fish-2")}}},
		}})
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "" {
		t.Fatalf("submitting the form answered %d %q", resp.StatusCode, body)
	}
	h.reply(root, "Thanks, Ada.")
	result := lastToolResult(t, h)
	for _, want := range []string{"Name: Ada Lovelace", "Agreed to terms: true", "Birthdate: 1815-12-10", "Favorite Integer: 7",
		`"untitledSingleSelectEnum": "Joey"`, `"Piano"`, `"Drums"`, `"fish-2"`} {
		if !strings.Contains(result, want) {
			t.Errorf("the server got %q; want %s in it", result, want)
		}
	}
}

// submitOn submits a modal to the bot at addr.
func (h *harness) submitOn(addr string, s slacktest.Submission) *http.Response {
	h.t.Helper()
	req := h.signer.Request(http.MethodPost, "http://"+addr+"/slack/interactions", "application/x-www-form-urlencoded", slacktest.ViewSubmission(s), time.Now())
	resp, err := botClient.Do(req)
	if err != nil {
		h.t.Fatalf("submit on %s: %v", addr, err)
	}
	return resp
}

// The replica running a call is killed while the call's form waits for
// an answer (its stdio server dies with it). Another replica shows the
// same request and takes the answer; the call, cut off, is retried from
// the outcome-unknown card and its server asks again. Answered before the
// retry, the saved answer is the answer at once; answered after it, the
// same message takes it. Either way: one request in the thread, the call
// finishes once.
func TestMCPInputRequestSurvivesAKilledReplica(t *testing.T) {
	t.Parallel()
	t.Run("answered before the retry", func(t *testing.T) { t.Parallel(); inputRequestAcrossACrash(t, true) })
	t.Run("answered after the retry", func(t *testing.T) { t.Parallel(); inputRequestAcrossACrash(t, false) })
}

func inputRequestAcrossACrash(t *testing.T, answerFirst bool) {
	h := newHarness(t, everythingPolicy(t, ""))
	h.model.Then(
		llmtest.Reply("I need your details.", llmtest.Call("c1", "everything__trigger-elicitation-request", `{}`)),
		llmtest.Reply("Thanks, Ada."),
	)
	h.command("sign me up", nil, nil)
	root := h.root(1)
	h.click(h.cardWith(root, "approve", serverStart), "approve", approver)
	question := h.cardWith(root, "elicit_answer", serverStart)
	other := h.replica()
	h.kill()

	answer := func() {
		h.clickOn(other, question, "elicit_answer", requester)
		view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
		resp := h.submitOn(other, slacktest.Submission{User: requester, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
			Values: map[string]map[string]string{"field:name": {"value": "Ada Lovelace"}}})
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "" {
			t.Fatalf("submitting the form to the other replica answered %d %q", resp.StatusCode, body)
		}
		h.eventually(func() bool { return strings.Contains(h.card(question), "Answered by <@"+requester+">") }, "the request to say who answered")
	}
	if answerFirst {
		answer()
	}

	// The other replica takes the thread over once the killed one's lease
	// lapses: the call was cut off.
	var unknown slacktest.Call
	deadline := time.Now().Add(60 * time.Second)
	for unknown.TS == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no outcome-unknown card after the replica died")
		}
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if hasAction(c, "retry") && hasAction(c, "mark_done") {
				unknown = c
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	updates := len(h.slack.CallsTo("chat.update"))
	h.clickOn(other, unknown, "retry", approver)
	want := "answered with the answer given before"
	if !answerFirst {
		want = "the request already posted waits for the answer"
		// The other replica starts its own server first.
		for !strings.Contains(h.logs.String(), want) {
			if time.Now().After(deadline.Add(serverStart)) {
				t.Fatalf("the retried call did not wait on the same request")
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The message now gives the new attempt's deadline; its buttons
		// are the same.
		h.eventually(func() bool {
			for _, c := range h.slack.CallsTo("chat.update")[updates:] {
				if c.TS == question.TS && strings.Contains(string(c.Blocks), "elicit_answer") {
					return true
				}
			}
			return false
		}, "the request to be shown again with its new deadline")
		answer()
	}
	replyWithin(t, h, root, "Thanks, Ada.", serverStart)
	if got := lastToolResult(t, h); !strings.Contains(got, "Name: Ada Lovelace") {
		t.Errorf("the model was told %q; want the answer given after the crash", got)
	}
	asked := 0
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if hasAction(c, "elicit_answer") || strings.Contains(h.card(c), "asks for your input") {
			asked++
		}
	}
	if asked != 1 {
		t.Errorf("%d requests for input in the thread, want the one, answered once", asked)
	}
	if n := len(h.model.Requests()); n != 2 {
		t.Errorf("the model was asked %d times, want 2: the call finished once", n)
	}
	if !strings.Contains(h.logs.String(), want) {
		t.Errorf("the log does not say %q", want)
	}
}

// replyWithin waits up to within for a thread message whose text
// contains want.
func replyWithin(t *testing.T, h *harness, root slacktest.Call, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if strings.Contains(c.Text, want) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for a reply containing %q", want)
}
