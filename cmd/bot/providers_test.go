package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
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
// request: asking again cannot help, so it is not retried, its card has
// no Retry button, and a reply in the thread is told so. vLLM says it in
// an error of its own shape.
func TestContextFullInSlack(t *testing.T) {
	t.Parallel()
	for _, recording := range []string{"openai-context-length.json", "vllm-context-length.json"} {
		t.Run(recording, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "")
			refused := llmtest.Recording(t, recording)
			refused.Status = http.StatusBadRequest
			h.model.ThenRaw(refused)
			h.model.Then(llmtest.Reply("never"))
			h.command("weather in Oslo?", nil, nil)
			root := h.root(1)
			failure := h.reply(root, "stopped with an error")
			card := h.card(failure)
			if !strings.Contains(card, "no longer fits in the model's context window: start a new thread") {
				t.Errorf("the error card says %s, want that the conversation no longer fits and to start a new thread", card)
			}
			if hasAction(failure, "retry_run") || !strings.Contains(card, "Retrying would fail the same way") {
				t.Errorf("the error card is %s, want no retry_run button and that retrying would fail the same way", card)
			}
			if strings.Contains(card, `"object"`) {
				t.Errorf("the error card quotes the server's JSON: %s", card)
			}
			h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": requester,
				"text": "and now?", "ts": "1700000100.000100", "thread_ts": root.TS})
			h.ephemeral(requester, "I can't go on in this thread")
			if n := len(h.model.Requests()); n != 1 {
				t.Errorf("%d model requests, want 1 (no retry)", n)
			}
		})
	}
}

// TestRetryOfAFinalFailureOnAnEarlierCard: a run's retry fails in a way
// a retry cannot fix; the card of the earlier failure still has its Retry
// button (as a card posted by an earlier version does), and a click on it
// is answered with what to do, without asking the model again.
func TestRetryOfAFinalFailureOnAnEarlierCard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.FailNext(4, http.StatusServiceUnavailable) // every attempt of the bot's retries
	h.command("hello", nil, nil)
	root := h.root(1)
	earlier := h.cardWith(root, "retry_run", 20*time.Second)
	h.model.ThenRaw(contextFull(t))
	h.model.Then(llmtest.Reply("never"))
	h.click(earlier, "retry_run", requester)
	var final slacktest.Call
	h.eventually(func() bool {
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if c.TS != earlier.TS && strings.Contains(h.card(c), "no longer fits") {
				final = c
				return true
			}
		}
		return false
	}, "the card of the retry's failure")
	if hasAction(final, "retry_run") {
		t.Errorf("the card of a failure a retry cannot fix has a Retry button: %s", h.card(final))
	}
	asked := len(h.model.Requests())
	h.click(earlier, "retry_run", requester)
	h.ephemeral(requester, "Retrying would fail the same way, so nothing was run. The run stopped: the model failed: this conversation no longer fits")
	if n := len(h.model.Requests()); n != asked || n != 5 {
		t.Errorf("%d model requests after the click on the earlier card, want %d (4 failed attempts and the retry's one)", n, asked)
	}
}

// TestChatOffersNoRetryOfAFinalFailure: bot chat does not offer to retry
// a run that would fail the same way, and says what to do.
func TestChatOffersNoRetryOfAFinalFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.ThenRaw(contextFull(t))
	h.model.Then(llmtest.Reply("never"))
	out := h.cli(t, "hello\nr\n", "chat", "--user", requester, "--thread", "chat-final")
	if strings.Contains(out, "[r]etry") || !strings.Contains(out, "Retrying would fail the same way. Start a new chat") {
		t.Errorf("bot chat printed:\n%s\nwant no retry offered, and to start a new chat", out)
	}
	if n := len(h.model.Requests()); n != 1 {
		t.Errorf("%d model requests, want 1", n)
	}
}

// contextFull is OpenAI's refusal of a conversation longer than the
// model's context window.
func contextFull(t *testing.T) llmtest.Raw {
	refused := llmtest.Recording(t, "openai-context-length.json")
	refused.Status = http.StatusBadRequest
	return refused
}

// TestProviderChangedWhileACallWaits: a call waits for approval, made by
// an OpenAI-compatible server with an ID of its own form; the operator
// changes the provider and restarts the bot; the approved call runs once
// and the new provider, given the conversation with that ID (which it
// would refuse as it is), answers in the thread.
func TestProviderChangedWhileACallWaits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, id string
		to       func(t *testing.T, answer string) (env []string, problems func() []string)
	}{
		{"Kimi's call ID to Anthropic", "functions.http_request:0", func(t *testing.T, answer string) ([]string, func() []string) {
			srv := llmtest.NewAnthropicServer(t, llmtest.Reply(answer))
			return []string{"LLM_PROVIDER=anthropic", "ANTHROPIC_API_KEY=test-key", "ANTHROPIC_BASE_URL=" + srv.URL()}, func() (out []string) {
				for _, r := range srv.Requests() {
					out = append(out, r.Problem)
				}
				return out
			}
		}},
		{"vLLM's call ID to OpenAI", "chatcmpl-tool-9f1c2b7e4d5a4c3b8e6f0a1b2c3d4e5f", func(t *testing.T, answer string) ([]string, func() []string) {
			srv := llmtest.NewOpenAIServer(t, llmtest.Reply(answer))
			return []string{"OPENAI_BASE_URL=" + srv.URL(), "LLM_MODEL=gpt-4.1"}, func() (out []string) {
				for _, r := range srv.Requests() {
					out = append(out, r.Problem)
				}
				return out
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "")
			h.model.Then(llmtest.Reply("Deploying.", call(tt.id, "POST", h.target.URL+"/deploy", "v2")))
			h.command("deploy", nil, nil)
			root := h.root(1)
			card := h.cards(root, 1)[0]
			env, problems := tt.to(t, "Deployed.")
			h.restartWith(env...)
			h.click(card, "approve", approver)
			h.reply(root, "Deployed.")
			if n := h.target.Count("POST /deploy"); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
			if got := problems(); len(got) != 1 || got[0] != "" {
				t.Errorf("the new provider's requests were refused: %q, want one request, taken", got)
			}
		})
	}
}

// TestAzureDeploymentURLRefused: a bot pointed at an Azure OpenAI
// deployment URL (…/openai/deployments/NAME?api-version=…), which it does
// not speak, does not start: it says to use Azure's v1 endpoint, and does
// not print the key, rather than start and fail every conversation with a
// 404 from a mangled URL.
func TestAzureDeploymentURLRefused(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "")
	h.env = append(h.env, "OPENAI_API_KEY=azure-secret-key",
		"OPENAI_BASE_URL=https://team.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, botBinary)
	cmd.Env = h.env
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the bot started with an Azure deployment URL (exit: %v); it printed:\n%s", err, out)
	}
	if !strings.Contains(out, "https://NAME.openai.azure.com/openai/v1") || !strings.Contains(out, "OPENAI_BASE_URL") {
		t.Errorf("the bot printed:\n%s\nwant that OPENAI_BASE_URL should be Azure's v1 endpoint", out)
	}
	if strings.Contains(out, "azure-secret-key") {
		t.Errorf("the bot printed its key:\n%s", out)
	}
}

// TestServerRepeatsCallIDs: through the binary, a server that gives every
// call the same ID (text-generation-inference's "0") asks for one call,
// then, given its result, for another: both are approved and run once,
// and the model's answer after them reaches the thread, rather than the
// run failing because the conversation it is sent has two calls of one
// ID.
func TestServerRepeatsCallIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("Stopping first.", call("0", "POST", h.target.URL+"/stop", "")),
		llmtest.Reply("Now deploying.", call("0", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Stopped and deployed."),
	)
	h.command("stop, then deploy", nil, nil)
	root := h.root(1)
	h.click(h.cards(root, 1)[0], "approve", approver)
	h.click(h.cards(root, 2)[1], "approve", approver)
	h.reply(root, "Stopped and deployed.")
	for _, op := range []string{"POST /stop", "POST /deploy"} {
		if n := h.target.Count(op); n != 1 {
			t.Errorf("%s ran %d times, want 1", op, n)
		}
	}
	for i, r := range h.model.Requests() {
		if r.Problem != "" {
			t.Errorf("model request %d refused: %s", i+1, r.Problem)
		}
	}
}

// TestTemperatureRefusedInSlack: LLM_TEMPERATURE set, and LLM_MODEL an
// Azure deployment of a reasoning model, named by its owner so that the
// bot cannot tell: the model refuses the temperature, and the person
// gets the answer all the same, not an error card that a Retry would
// only repeat.
func TestTemperatureRefusedInSlack(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "", llmtest.Reply("Sunny in Oslo."), llmtest.Reply("And tomorrow too."))
	h.model.Reasoning("prod-reasoner")
	h.env = append(h.env, "LLM_MODEL=prod-reasoner", "LLM_TEMPERATURE=0.2")
	h.start()
	h.command("weather in Oslo?", nil, nil)
	root := h.root(1)
	h.reply(root, "Sunny in Oslo.")
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": requester,
		"text": "and tomorrow?", "ts": "1700000100.000100", "thread_ts": root.TS})
	h.reply(root, "And tomorrow too.")
	if n := len(h.model.Requests()); n != 3 {
		t.Errorf("%d model requests, want 3 (the refused one, then one per turn)", n)
	}
	if !strings.Contains(h.logs.String(), "LLM_TEMPERATURE is not sent to it") {
		t.Errorf("the bot did not tell its operator that the model refuses LLM_TEMPERATURE")
	}
}

// TestReasoningModelGetsItsInstructions: with LLM_MODEL=o3, the bot's
// instructions reach the model as a developer message of their own, and
// the person's request as theirs alone: never one message with both, in
// which the model would weigh the bot's instructions as the person's.
// LLM_REASONING_EFFORT reaches it as reasoning_effort.
func TestReasoningModelGetsItsInstructions(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "", llmtest.Reply("Sunny in Oslo."))
	h.env = append(h.env, "LLM_MODEL=o3", "LLM_REASONING_EFFORT=low")
	h.start()
	h.command("weather in Oslo?", nil, nil)
	h.reply(h.root(1), "Sunny in Oslo.")
	if body := string(h.model.Requests()[0].Body); !strings.Contains(body, `"reasoning_effort":"low"`) {
		t.Errorf("request = %s, want reasoning_effort low", body)
	}
	msgs := h.model.Requests()[0].Messages
	if len(msgs) < 2 || msgs[0].Role != "developer" || !strings.Contains(msgs[0].Text(), "Countersign") {
		t.Fatalf("messages = %+v, want the bot's instructions first, as a developer message", msgs)
	}
	last := msgs[len(msgs)-1]
	if last.Role != "user" || !strings.HasSuffix(last.Text(), "weather in Oslo?") || strings.Contains(last.Text(), "Countersign") {
		t.Errorf("the person's message = %q (%s), want their request without the bot's instructions", last.Text(), last.Role)
	}
}

// TestStreamOptionsRefusedInSlack: pointed at a server that refuses
// OpenAI's stream_options (Mistral's API), the bot streams its answer to
// the thread all the same, rather than failing every conversation with a
// 422, and says so to its operator once.
func TestStreamOptionsRefusedInSlack(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "", llmtest.Reply(streamedAnswer), llmtest.Reply("And tomorrow too."))
	h.model.ActAsMistral()
	h.start()
	h.command("weather in Oslo?", nil, nil)
	root := h.root(1)
	h.reply(root, streamedAnswer)
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": requester,
		"text": "and tomorrow?", "ts": "1700000100.000100", "thread_ts": root.TS})
	h.reply(root, "And tomorrow too.")
	var statuses []int
	for _, r := range h.model.Requests() {
		statuses = append(statuses, r.Status)
	}
	if fmt.Sprint(statuses) != "[422 200 200]" {
		t.Errorf("model answers = %v, want one refusal, then one answer per turn", statuses)
	}
	if n := strings.Count(h.logs.String(), "the server refuses stream_options"); n != 1 {
		t.Errorf("the bot told its operator %d times that the server refuses stream_options, want 1", n)
	}
}

// TestBaseURLWithoutV1InSlack: OPENAI_BASE_URL is Ollama's address
// without /v1, where its router answers a bare 404: the error card says
// that the API root usually ends in /v1, after one request (a 404 is not
// retried).
func TestBaseURLWithoutV1InSlack(t *testing.T) {
	t.Parallel()
	ollama := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(ollama.Close)
	h := newIdleHarness(t, "")
	h.env = append(h.env, "OPENAI_BASE_URL="+ollama.URL, "LLM_MODEL=llama3.1")
	h.start()
	h.command("weather in Oslo?", nil, nil)
	failure := h.reply(h.root(1), "stopped with an error")
	if card := h.card(failure); !strings.Contains(card, "404 page not found") || !strings.Contains(card, "the API root usually ends in /v1") {
		t.Errorf("the error card says %s, want the 404 and that the base URL usually ends in /v1", card)
	}
}
