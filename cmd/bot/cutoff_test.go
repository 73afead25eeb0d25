package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// TestCutOffAnswerContinuedInSlack: through the binary, the model's
// streamed answer stops at the length limit; the bot asks it once to go
// on, and the thread shows the whole answer once, in one message, without
// a note that it was cut off.
func TestCutOffAnswerContinuedInSlack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.restartWith("SLACK_STREAM_INTERVAL=1ms")
	h.model.ThenRaw(llmtest.Recording(t, "openai-length.sse"))
	h.model.Then(llmtest.Reply("restart it; third, start it again."))
	h.command("how do I restart the service?", nil, nil)
	root := h.root(1)
	const whole = "The three steps are: first, stop the service; second, restart it; third, start it again."
	h.eventually(func() bool {
		texts := h.threadTexts(root)
		m := h.slack.Messages(root.Channel, root.TS)
		return len(texts) > 0 && texts[len(texts)-1] == whole &&
			len(m) > 0 && !h.slack.Streaming(m[len(m)-1].Channel, m[len(m)-1].TS)
	}, "the whole answer in the thread, its stream stopped")
	if texts := h.threadTexts(root); len(texts) != 1 {
		t.Errorf("thread = %q, want the answer once, in one message", texts)
	}
	reqs := h.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2 (the answer and its continuation)", len(reqs))
	}
	msgs := reqs[1].Messages
	if n := len(msgs); n < 2 || msgs[n-2].Role != "assistant" || !strings.HasSuffix(msgs[n-2].Text(), "second,") ||
		msgs[n-1].Role != "user" || msgs[n-1].Text() != llm.ContinuePrompt {
		t.Errorf("the continuation was asked with %+v, want the cut-off answer and a request to go on last", msgs)
	}
}

// TestStoppedToolCallInSlack: through the binary, the provider's content
// filter stops the model's streamed answer while it writes an
// http_request call whose arguments, as far as they came, are a valid
// object. The call never runs and nobody is asked to approve it; the
// model is told the filter stopped it (not that it hit the length limit),
// and the thread gets its answer.
func TestStoppedToolCallInSlack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	args, _ := json.Marshal(map[string]string{"method": "POST", "url": h.target.URL + "/deploy"})
	quoted, _ := json.Marshal(string(args))
	raw := llmtest.Recording(t, "openai-content-filter-call.sse")
	raw.Body = strings.NewReplacer(`"name":"lookup"`, `"name":"http_request"`,
		`"arguments":"{\"n\":1}"`, `"arguments":`+string(quoted)).Replace(raw.Body)
	if !strings.Contains(raw.Body, "/deploy") {
		t.Fatalf("the recording was not rewritten to call http_request:\n%s", raw.Body)
	}
	h.model.ThenRaw(raw)
	h.model.Then(llmtest.Reply("The content filter stopped that call; nothing was sent."))
	h.command("deploy v2", nil, nil)
	root := h.root(1)
	h.reply(root, "nothing was sent")
	for _, m := range h.slack.Messages(root.Channel, root.TS) {
		if hasAction(m, "approve") {
			t.Errorf("an approval card was posted for the stopped call: %q", m.Text)
		}
	}
	if n := h.target.Total(); n != 0 {
		t.Errorf("the stopped call reached its target %d times, want never", n)
	}
	reqs := h.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2 (the stopped call and the answer)", len(reqs))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if told := last.Text(); last.Role != "tool" || !strings.Contains(told, "content filter stopped") ||
		!strings.Contains(told, "not run") || strings.Contains(told, "length limit") {
		t.Errorf("the model was told %q (%s), want that the content filter stopped the call and it was not run", told, last.Role)
	}
}
