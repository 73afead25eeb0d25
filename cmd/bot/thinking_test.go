package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// thinkingSecrets are parts of the model's working in these tests: the
// thinking text, the signature the fake gives it, the redacted data.
// None may reach Slack or the logs.
var thinkingSecrets = []string{"SECRET-PLAN-7", "EqQBllmtest", "EmwKredacted-data"}

func thinkingReply(h *harness) llm.Message {
	first := llmtest.Reply("Deploying.", call("toolu_1", "POST", h.target.URL+"/deploy", "v2"))
	first.Thinking = []llm.Thinking{
		{Type: llm.ThinkingBlock, Text: "SECRET-PLAN-7: deploy v2 <now> & say so."},
		{Type: llm.RedactedThinkingBlock, Data: "EmwKredacted-data"},
	}
	return first
}

// checkNoThinkingShown fails if any part of the model's working reached
// Slack (messages, cards, streams) or the bot's logs.
func checkNoThinkingShown(t *testing.T, h *harness) {
	t.Helper()
	for _, c := range h.slack.Calls() {
		b, _ := json.Marshal(c) // a Call always marshals
		for _, s := range thinkingSecrets {
			if strings.Contains(string(b), s) {
				t.Errorf("Slack was sent the model's thinking (%s) in %s: %s", s, c.Method, b)
			}
		}
	}
	for _, s := range thinkingSecrets {
		if strings.Contains(h.logs.String(), s) {
			t.Errorf("the logs have the model's thinking (%s)", s)
		}
	}
}

// TestAnthropicThinkingAcrossApprovalInSlack: with Anthropic's extended
// thinking on (LLM_THINKING_BUDGET, or a proxy that turns it on), the
// model thinks, then asks for a risky call; the call waits for approval,
// the bot restarts, and another process resumes the run from the
// checkpoint: the call runs once, and the request after it carries the
// thinking blocks back as the model wrote them (the fake, as Anthropic,
// refuses it otherwise), so the answer reaches the thread. The thinking
// is never shown: not in Slack, not in the logs, and bot checkpoints
// show counts the blocks without showing them.
func TestAnthropicThinkingAcrossApprovalInSlack(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		env    []string
		proxy  bool
		budget int
	}{
		{"LLM_THINKING_BUDGET", []string{"LLM_THINKING_BUDGET=2048"}, false, 2048},
		{"a proxy turns it on", nil, true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newIdleHarness(t, "")
			srv := llmtest.NewAnthropicServer(t, thinkingReply(h), llmtest.Reply("Deployed v2."))
			if tt.proxy {
				srv.ThinkAlways()
			}
			h.env = append(h.env, "LLM_PROVIDER=anthropic", "ANTHROPIC_API_KEY=test-key", "ANTHROPIC_BASE_URL="+srv.URL())
			h.env = append(h.env, tt.env...)
			h.start()
			h.command("deploy", nil, nil)
			root := h.root(1)
			card := h.cards(root, 1)[0]
			h.restartWith() // another process takes the run up
			h.click(card, "approve", approver)
			h.reply(root, "Deployed v2.")
			if n := h.target.Count("POST /deploy"); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
			reqs := srv.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d model requests, want 2", len(reqs))
			}
			for i, r := range reqs {
				if r.Problem != "" || r.ThinkingBudget != tt.budget || (tt.budget > 0 && r.MaxTokens <= tt.budget) {
					t.Errorf("model request %d: problem %q, thinking budget %d, max_tokens %d; want taken, budget %d below max_tokens",
						i+1, r.Problem, r.ThinkingBudget, r.MaxTokens, tt.budget)
				}
			}
			turn := reqs[1].Messages[1]
			if len(turn.Content) < 2 || turn.Content[0].Type != "thinking" || !strings.HasPrefix(turn.Content[0].Thinking, "SECRET-PLAN-7") ||
				turn.Content[1].Type != "redacted_thinking" || turn.Content[1].Data != "EmwKredacted-data" {
				t.Errorf("the assistant turn sent back after the call = %+v, want its thinking blocks first", turn.Content)
			}
			thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
			shown := h.cli(t, "", "checkpoints", "show", "--thread", thread)
			if !strings.Contains(shown, "[2 thinking blocks kept, not shown]") {
				t.Errorf("checkpoints show:\n%s\nwant the thinking blocks counted", shown)
			}
			for _, s := range thinkingSecrets {
				if strings.Contains(shown, s) {
					t.Errorf("checkpoints show has the model's thinking (%s):\n%s", s, shown)
				}
			}
			checkNoThinkingShown(t, h)
		})
	}
}

// TestThinkingNotSentToAnotherProvider: a call made by Anthropic with
// extended thinking waits; the operator switches the bot to an
// OpenAI-compatible server; the approved call runs once and the new
// provider answers, sent the conversation without Anthropic's thinking.
func TestThinkingNotSentToAnotherProvider(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "", llmtest.Reply("Deployed v2."))
	srv := llmtest.NewAnthropicServer(t, thinkingReply(h))
	h.env = append(h.env, "LLM_PROVIDER=anthropic", "ANTHROPIC_API_KEY=test-key", "ANTHROPIC_BASE_URL="+srv.URL(), "LLM_THINKING_BUDGET=1024")
	h.start()
	h.command("deploy", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.restartWith("LLM_PROVIDER=openai", "LLM_THINKING_BUDGET=")
	h.click(card, "approve", approver)
	h.reply(root, "Deployed v2.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	reqs := h.model.Requests()
	if len(reqs) != 1 || reqs[0].Problem != "" {
		t.Fatalf("OpenAI requests: %+v, want one, taken", reqs)
	}
	for _, s := range append(thinkingSecrets, `"thinking"`, "redacted_thinking") {
		if strings.Contains(string(reqs[0].Body), s) {
			t.Errorf("the OpenAI request has %s: %s", s, reqs[0].Body)
		}
	}
	checkNoThinkingShown(t, h)
}

// TestPausedTurnContinuedInSlack: through the binary, Anthropic (behind
// a proxy that turns thinking on) pauses a long turn; the bot sends it
// back to be continued, and the thread gets the whole answer, once, not
// the paused half as if it were the end.
func TestPausedTurnContinuedInSlack(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "")
	srv := llmtest.NewAnthropicServer(t,
		llm.Message{Role: llm.RoleAssistant, Content: "Searching the runbook.", Stop: llm.StopPaused},
		llmtest.Reply(" Found it: restart the worker."))
	srv.ThinkAlways()
	h.env = append(h.env, "LLM_PROVIDER=anthropic", "ANTHROPIC_API_KEY=test-key", "ANTHROPIC_BASE_URL="+srv.URL())
	h.start()
	h.command("how do I fix the queue?", nil, nil)
	root := h.root(1)
	const want = "Searching the runbook. Found it: restart the worker."
	h.eventually(func() bool {
		texts := h.threadTexts(root)
		return len(texts) > 0 && texts[len(texts)-1] == want
	}, "the whole answer in the thread")
	if texts := h.threadTexts(root); len(texts) != 1 {
		t.Errorf("thread = %q, want the answer once", texts)
	}
	for i, r := range srv.Requests() {
		if r.Problem != "" {
			t.Errorf("model request %d refused: %s", i+1, r.Problem)
		}
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2 (the paused turn and its continuation)", n)
	}
}

// TestAnthropicStopsInSlack: through the binary, Anthropic's ways of
// stopping a reply reach the thread as a person expects: a call the
// model was writing when it refused, or when its reply hit max_tokens,
// is never run and no card asks for it (even when what arrived of it
// parses); the model is told and its next answer reaches the thread. An
// overloaded_error in the middle of a stream is asked again, like a
// 529, and the answer is in the thread once.
func TestAnthropicStopsInSlack(t *testing.T) {
	t.Parallel()
	stopped := func(h *harness, stop llm.Stop) llm.Message {
		m := llmtest.Reply("Deploying.", call("toolu_1", "POST", h.target.URL+"/deploy", "v2"))
		m.Stop = stop
		return m
	}
	for _, tt := range []struct {
		name   string
		script func(h *harness, srv *llmtest.AnthropicServer)
		want   string
		asked  int
	}{
		{"refusal while writing a call", func(h *harness, srv *llmtest.AnthropicServer) {
			srv.Then(stopped(h, llm.StopRefused), llmtest.Reply("I won't deploy that."))
		}, "I won't deploy that.", 2},
		{"max_tokens while writing a call", func(h *harness, srv *llmtest.AnthropicServer) {
			srv.Then(stopped(h, llm.StopCutOff), llmtest.Reply("That call was too long; say which version."))
		}, "That call was too long; say which version.", 2},
		{"overloaded_error in the stream", func(h *harness, srv *llmtest.AnthropicServer) {
			srv.ThenRaw(llmtest.Recording(t, "anthropic-overloaded.sse"))
			srv.Then(llmtest.Reply("Nothing to deploy today."))
		}, "Nothing to deploy today.", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newIdleHarness(t, "")
			srv := llmtest.NewAnthropicServer(t)
			tt.script(h, srv)
			h.env = append(h.env, "LLM_PROVIDER=anthropic", "ANTHROPIC_API_KEY=test-key", "ANTHROPIC_BASE_URL="+srv.URL())
			h.start()
			h.command("deploy", nil, nil)
			root := h.root(1)
			h.eventually(func() bool {
				texts := h.threadTexts(root)
				return len(texts) > 0 && strings.Contains(texts[len(texts)-1], tt.want)
			}, "%q in the thread", tt.want)
			if n := h.target.Count("POST /deploy"); n != 0 {
				t.Errorf("deploy ran %d times, want never", n)
			}
			for _, c := range h.slack.Messages(root.Channel, root.TS) {
				if hasAction(c, "approve") {
					t.Errorf("a card asks to approve the stopped call: %s", h.card(c))
				}
			}
			if n := strings.Count(strings.Join(h.threadTexts(root), "\n"), tt.want); n != 1 {
				t.Errorf("the answer is in the thread %d times, want once: %q", n, h.threadTexts(root))
			}
			if n := len(srv.Requests()); n != tt.asked {
				t.Errorf("%d model requests, want %d", n, tt.asked)
			}
		})
	}
}
