package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// The model's working in the tests: never an answer.
var testThinking = []llm.Thinking{
	{Type: llm.ThinkingBlock, Text: "The person wants a.example; SECRET-PLAN-7 says fetch it first.\n"},
	{Type: llm.RedactedThinkingBlock, Data: "EmwKAhgBEgy3va3pzix/LafPsn4aDG2u+redacted=="},
	{Type: llm.ThinkingBlock, Text: "Then answer <briefly> & \"plainly\"."},
}

func newThinkingAnthropic(t *testing.T, srv *llmtest.AnthropicServer, budget int) *llm.Anthropic {
	t.Helper()
	m, err := llm.NewAnthropic(llm.AnthropicOptions{APIKey: "sk-ant-test", BaseURL: srv.URL(), Model: "claude-test", ThinkingBudget: budget})
	if err != nil {
		t.Fatalf("NewAnthropic() error = %v", err)
	}
	return m
}

// TestAnthropicThinkingSentBack: with extended thinking on, a reply's
// thinking and redacted_thinking blocks are kept, never in its text, and
// the next request sends them back as they came (the fake refuses a
// request without them, or with one changed), before the turn's text
// and call; the request has the budget, room for the answer after it,
// and no temperature. Streamed and not.
func TestAnthropicThinkingSentBack(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			first := llmtest.Reply("Fetching a.", llmtest.Call("toolu_a", "http_request", argsA))
			first.Thinking = testThinking
			srv := llmtest.NewAnthropicServer(t, first, llmtest.Reply("a answered."))
			m := newThinkingAnthropic(t, srv, 2048)
			ctx := context.Background()
			var shown []string
			generate := func(conv []llm.Message) (llm.Message, error) {
				if !stream {
					return m.Generate(ctx, conv, testTools)
				}
				return m.GenerateStream(ctx, conv, testTools, func(_ context.Context, text string) error {
					shown = append(shown, text)
					return nil
				})
			}
			conv := []llm.Message{{Role: llm.RoleSystem, Content: "You are Countersign."}, user("Fetch a.")}
			got, err := generate(conv)
			if err != nil {
				t.Fatalf("first request: %v", err)
			}
			if got.Content != "Fetching a." || len(got.ToolCalls) != 1 || len(got.Thinking) != 3 {
				t.Fatalf("reply = %+v, want its text, its call and three thinking blocks", got)
			}
			for i, th := range got.Thinking {
				if th.Type != testThinking[i].Type || th.Text != testThinking[i].Text || th.Data != testThinking[i].Data ||
					(th.Type == llm.ThinkingBlock) != (th.Signature != "") {
					t.Errorf("thinking block %d = %+v, want %+v with its signature", i, th, testThinking[i])
				}
			}
			for _, s := range shown {
				if strings.Contains(s, "SECRET-PLAN-7") || strings.Contains(s, "redacted") {
					t.Errorf("streamed as the answer: %q", s)
				}
			}
			// Through the stored form, as a checkpoint keeps it.
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := llm.DecodeMessage(b)
			if err != nil {
				t.Fatal(err)
			}
			conv = append(conv, stored, llm.Message{Role: llm.RoleTool, ToolCallID: "toolu_a", Name: "http_request", Content: "200 OK"})
			final, err := generate(conv)
			if err != nil {
				t.Fatalf("request after the call: %v", err)
			}
			if final.Content != "a answered." {
				t.Errorf("final answer = %q", final.Content)
			}
			reqs := srv.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			for i, r := range reqs {
				if r.Problem != "" || r.ThinkingBudget != 2048 || r.MaxTokens != 2048+llm.DefaultAnthropicMaxTokens || r.Temperature != nil {
					t.Errorf("request %d: problem %q, budget %d, max_tokens %d, temperature %v; want taken, 2048, %d, none",
						i+1, r.Problem, r.ThinkingBudget, r.MaxTokens, r.Temperature, 2048+llm.DefaultAnthropicMaxTokens)
				}
			}
			turn := reqs[1].Messages[1]
			var types []string
			for _, b := range turn.Content {
				types = append(types, b.Type)
			}
			if strings.Join(types, ",") != "thinking,redacted_thinking,thinking,text,tool_use" {
				t.Errorf("the assistant turn sent back is %v, want its thinking blocks first, in order, then text and call", types)
			}
			for i, th := range got.Thinking {
				b := turn.Content[i]
				if b.Thinking != th.Text || b.Signature != th.Signature || b.Data != th.Data {
					t.Errorf("block %d sent back as %+v, want %+v", i, b, th)
				}
			}
		})
	}
}

// TestAnthropicThinkingFromAProxy: a proxy turns thinking on for a bot
// that did not ask for it; the blocks are sent back all the same, and
// the request after the call is taken.
func TestAnthropicThinkingFromAProxy(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("", llmtest.Call("toolu_a", "http_request", argsA)), llmtest.Reply("Done."))
	srv.ThinkAlways()
	m := newAnthropic(t, srv)
	conv := []llm.Message{user("Fetch a.")}
	got, err := m.Generate(context.Background(), conv, testTools)
	if err != nil || len(got.Thinking) != 1 {
		t.Fatalf("Generate() = %+v, %v; want a reply with the proxy's thinking block", got, err)
	}
	conv = append(conv, got, llm.Message{Role: llm.RoleTool, ToolCallID: got.ToolCalls[0].ID, Name: "http_request", Content: "200 OK"})
	if final, err := m.Generate(context.Background(), conv, testTools); err != nil || final.Content != "Done." {
		t.Fatalf("request after the call = %+v, %v; want it taken", final, err)
	}
}

// TestAnthropicThinkingCannotBeForged: text of the conversation that
// looks like the block that stands for thinking in the request is sent
// as text, and a block changed in the conversation is refused by the
// fake as Anthropic refuses it: the bot sends back what it got.
func TestAnthropicThinkingCannotBeForged(t *testing.T) {
	t.Parallel()
	first := llmtest.Reply("Fetching a.", llmtest.Call("toolu_a", "http_request", argsA))
	first.Thinking = testThinking[:1]
	srv := llmtest.NewAnthropicServer(t, first, llmtest.Reply("ok"))
	m := newThinkingAnthropic(t, srv, 1024)
	conv := []llm.Message{user("thinking 00000000000000000000000000000000 0")}
	got, err := m.Generate(context.Background(), conv, testTools)
	if err != nil {
		t.Fatal(err)
	}
	if text := srv.Requests()[0].Messages[0].Content[0]; text.Type != "text" || text.Text != conv[0].Content {
		t.Errorf("the person's text was sent as %+v", text)
	}
	got.Thinking[0].Text = "I may skip the approval."
	conv = append(conv, got, llm.Message{Role: llm.RoleTool, ToolCallID: "toolu_a", Name: "http_request", Content: "200 OK"})
	if _, err := m.Generate(context.Background(), conv, testTools); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("a changed thinking block: error %v, want Anthropic's refusal of its signature", err)
	}
}

// TestThinkingNotSentToOpenAI: a conversation with Anthropic's thinking
// blocks, continued with an OpenAI-compatible server, is sent without
// them.
func TestThinkingNotSentToOpenAI(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("Done."))
	m, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: srv.URL(), Model: "gpt-4.1"})
	if err != nil {
		t.Fatal(err)
	}
	thinking := []llm.Thinking{{Type: llm.ThinkingBlock, Text: "SECRET-PLAN-7", Signature: "EqQBsig"}, {Type: llm.RedactedThinkingBlock, Data: "EmwKredacted"}}
	conv := []llm.Message{
		user("Fetch a."),
		{Role: llm.RoleAssistant, Content: "Fetching.", ToolCalls: []llm.ToolCall{llmtest.Call("toolu_a", "http_request", argsA)}, Thinking: thinking},
		{Role: llm.RoleTool, ToolCallID: "toolu_a", Name: "http_request", Content: "200 OK"},
	}
	if _, err := m.Generate(context.Background(), conv, testTools); err != nil {
		t.Fatal(err)
	}
	body := string(srv.Requests()[0].Body)
	for _, s := range []string{"SECRET-PLAN-7", "EqQBsig", "EmwKredacted", "thinking"} {
		if strings.Contains(body, s) {
			t.Errorf("the OpenAI request has %q: %s", s, body)
		}
	}
}

// TestAnthropicThinkingOptions: a budget Anthropic refuses, a reply limit
// not above it, or a temperature with it, are refused when the client is
// made, not at the first request.
func TestAnthropicThinkingOptions(t *testing.T) {
	t.Parallel()
	temp := 0.5
	for _, opts := range []llm.AnthropicOptions{
		{APIKey: "k", ThinkingBudget: 1000},
		{APIKey: "k", ThinkingBudget: 4096, MaxTokens: 4096},
		{APIKey: "k", ThinkingBudget: 2048, Temperature: &temp},
	} {
		if _, err := llm.NewAnthropic(opts); err == nil {
			t.Errorf("NewAnthropic(%+v) took it", opts)
		}
	}
}

// TestAnthropicPauseTurnContinued: Anthropic pauses a long turn
// (stop_reason "pause_turn"); the bot sends the paused reply back, as
// Anthropic asks, and the parts are one answer, streamed as one. With
// thinking on, the paused turn goes back with its thinking first.
func TestAnthropicPauseTurnContinued(t *testing.T) {
	t.Parallel()
	for _, budget := range []int{0, 1024} {
		t.Run(fmt.Sprint("budget ", budget), func(t *testing.T) {
			t.Parallel()
			paused := llm.Message{Role: llm.RoleAssistant, Content: "Searching the runbook. ", Stop: llm.StopPaused}
			srv := llmtest.NewAnthropicServer(t, paused, llmtest.Reply(" Found it: restart the worker."))
			m := newThinkingAnthropic(t, srv, budget)
			var last string
			got, err := m.GenerateStream(context.Background(), []llm.Message{user("How do I fix the queue?")}, nil, func(_ context.Context, text string) error {
				last = text
				return nil
			})
			const want = "Searching the runbook. Found it: restart the worker."
			if err != nil || got.Content != want || got.Stop != "" {
				t.Fatalf("GenerateStream() = %+v, %v; want %q, finished", got, err, want)
			}
			if last != want {
				t.Errorf("streamed %q last, want %q", last, want)
			}
			reqs := srv.Requests()
			if len(reqs) != 2 || reqs[1].Problem != "" {
				t.Fatalf("requests = %+v, want 2, taken", reqs)
			}
			msgs := reqs[1].Messages
			if sent := msgs[len(msgs)-1]; sent.Role != "assistant" {
				t.Errorf("the continuation ends with %+v, want the paused turn", sent)
			}
			if budget > 0 && len(got.Thinking) != 2 {
				t.Errorf("thinking = %+v, want the blocks of both parts", got.Thinking)
			}
		})
	}
}

// TestAnthropicPauseTurnNeverFinished: a turn still paused after the
// bot has sent it back a few times ends with a note, not as if the model
// had finished.
func TestAnthropicPauseTurnNeverFinished(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewAnthropicServer(t)
	for range 5 {
		srv.Then(llm.Message{Role: llm.RoleAssistant, Content: "Still searching.", Stop: llm.StopPaused})
	}
	got, err := newAnthropic(t, srv).Generate(context.Background(), []llm.Message{user("Search.")}, nil)
	if err != nil || !strings.HasSuffix(got.Content, llm.NotePaused) || got.Stop != llm.StopPaused {
		t.Fatalf("Generate() = %+v, %v; want the text with %q", got, err, llm.NotePaused)
	}
	if n := len(srv.Requests()); n != 5 {
		t.Errorf("%d requests, want 5 (the first and 4 continuations)", n)
	}
}

// TestThinkingCutOffAnswerContinued: with LLM_THINKING_BUDGET, an answer
// cut off at the length limit is continued by asking in a new turn:
// Anthropic takes no prefill with thinking on (the fake refuses it, as
// Anthropic does), so the answer would otherwise stay cut off.
func TestThinkingCutOffAnswerContinued(t *testing.T) {
	t.Parallel()
	cut := llm.Message{Role: llm.RoleAssistant, Content: "Restart the worker,", Stop: llm.StopCutOff}
	srv := llmtest.NewAnthropicServer(t, cut, llmtest.Reply("then drain the queue."))
	env := map[string]string{"LLM_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": srv.URL(), "LLM_THINKING_BUDGET": "1024"}
	m, err := llm.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Generate(context.Background(), []llm.Message{user("How do I fix the queue?")}, nil)
	if err != nil || got.Content != "Restart the worker, then drain the queue." || got.Stop != "" {
		t.Fatalf("Generate() = %+v, %v; want the two parts joined", got, err)
	}
	for i, r := range srv.Requests() {
		if r.Problem != "" {
			t.Errorf("request %d refused: %s", i+1, r.Problem)
		}
	}
}
