package main

import (
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
