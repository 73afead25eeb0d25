package main

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
)

// TestBrokenStreamRetriedInSlack: through the binary, the model's stream
// breaks off half way (no [DONE]); the bot asks again and the thread
// shows the answer once, in the message the broken text was in.
func TestBrokenStreamRetriedInSlack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.restartWith("SLACK_STREAM_INTERVAL=1ms")
	h.model.ThenRaw(llmtest.Recording(t, "openai-cut.sse"))
	h.model.Then(llmtest.Reply(streamedAnswer))
	h.command("weather in Oslo?", nil, nil)
	root := h.root(1)
	h.eventually(func() bool {
		texts := h.threadTexts(root)
		m := h.slack.Messages(root.Channel, root.TS)
		return len(texts) > 0 && texts[len(texts)-1] == streamedAnswer &&
			len(m) > 0 && !h.slack.Streaming(m[len(m)-1].Channel, m[len(m)-1].TS)
	}, "the retried answer in the thread, its stream stopped")
	if texts := h.threadTexts(root); len(texts) != 1 {
		t.Errorf("thread = %q, want the answer once, in one message", texts)
	}
	if n := len(h.model.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2 (the broken one and its retry)", n)
	}
}

// TestOutOfQuotaInSlack: an account out of quota is said so in the
// thread, after one request: it is not retried.
func TestOutOfQuotaInSlack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	quota := llmtest.Recording(t, "openai-quota.json")
	quota.Status = 429
	h.model.ThenRaw(quota)
	h.model.Then(llmtest.Reply("never"))
	h.command("weather in Oslo?", nil, nil)
	root := h.root(1)
	failure := h.reply(root, "stopped with an error")
	if card := h.card(failure); !strings.Contains(card, "out of quota") {
		t.Errorf("the error card says %s, want that the account is out of quota", card)
	}
	if n := len(h.model.Requests()); n != 1 {
		t.Errorf("%d model requests, want 1 (no retry)", n)
	}
}

// TestContextFullInSlack: a conversation the model's context window no
// longer holds is said so in the thread, with what to do, after one
// request: asking again cannot help, so it is not retried.
func TestContextFullInSlack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	refused := llmtest.Recording(t, "openai-context-length.json")
	refused.Status = 400
	h.model.ThenRaw(refused)
	h.model.Then(llmtest.Reply("never"))
	h.command("weather in Oslo?", nil, nil)
	root := h.root(1)
	failure := h.reply(root, "stopped with an error")
	if card := h.card(failure); !strings.Contains(card, "no longer fits in the model's context window: start a new thread") {
		t.Errorf("the error card says %s, want that the conversation no longer fits and to start a new thread", card)
	}
	if n := len(h.model.Requests()); n != 1 {
		t.Errorf("%d model requests, want 1 (no retry)", n)
	}
}
