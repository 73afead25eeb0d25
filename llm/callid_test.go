package llm_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// A conversation begun with one provider goes on with another (the
// operator changed LLM_PROVIDER while a call waited for approval): the
// calls' IDs that the new provider would refuse — longer than OpenAI's 40
// characters (vLLM's "chatcmpl-tool-…"), or outside Anthropic's
// [a-zA-Z0-9_-] (Kimi's "functions.name:0") — are sent under IDs it takes,
// each result still paired with its call, and IDs it takes go unchanged.
func TestCallIDsOfAnotherProvider(t *testing.T) {
	t.Parallel()
	const (
		vllm   = "chatcmpl-tool-9f1c2b7e4d5a4c3b8e6f0a1b2c3d4e5f" // 46 characters
		kimi   = "functions.http_request:0"
		plain  = "call_abc123"
		claude = "toolu_01A09q90qw90lq917835lq9"
	)
	tests := []struct {
		provider string
		ids      []string
		keep     []string // the IDs sent as they are
	}{
		{"openai", []string{vllm, kimi, claude}, []string{kimi, claude}},
		{"anthropic", []string{vllm, kimi, plain}, []string{vllm, plain}},
	}
	for _, tt := range tests {
		t.Run(tt.provider, func(t *testing.T) {
			t.Parallel()
			var calls []llm.ToolCall
			msgs := []llm.Message{user("deploy everything")}
			for i, id := range tt.ids {
				calls = append(calls, llmtest.Call(id, fmt.Sprintf("tool%d", i), `{"url":"https://example.com"}`))
			}
			msgs = append(msgs, llmtest.Reply("On it.", calls...))
			for _, c := range calls {
				r := llmtest.Result(c, "result of "+c.Name)
				r.IsError = c.ID == kimi
				msgs = append(msgs, r)
			}
			var m llm.Model
			var sent func(n int) (calls, results map[string]string, problem string)
			if tt.provider == "openai" {
				srv := llmtest.NewOpenAIServer(t, llmtest.Reply("done"), llmtest.Reply("done"))
				o, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: srv.URL()})
				if err != nil {
					t.Fatal(err)
				}
				m = o
				sent = func(n int) (map[string]string, map[string]string, string) {
					calls, results := map[string]string{}, map[string]string{}
					r := srv.Requests()[n]
					for _, msg := range r.Messages {
						for _, c := range msg.ToolCalls {
							calls[c.ID] = c.Function.Name
						}
						if msg.Role == "tool" {
							results[msg.ToolCallID] = msg.Text()
						}
					}
					return calls, results, r.Problem
				}
			} else {
				srv := llmtest.NewAnthropicServer(t, llmtest.Reply("done"), llmtest.Reply("done"))
				a, err := llm.NewAnthropic(llm.AnthropicOptions{BaseURL: srv.URL()})
				if err != nil {
					t.Fatal(err)
				}
				m = a
				sent = func(n int) (map[string]string, map[string]string, string) {
					calls, results := map[string]string{}, map[string]string{}
					r := srv.Requests()[n]
					for _, msg := range r.Messages {
						for _, b := range msg.Content {
							switch b.Type {
							case "tool_use":
								calls[b.ID] = b.Name
							case "tool_result":
								text := b.ResultText()
								if b.IsError {
									text += " (error)"
								}
								results[b.ToolUseID] = text
							}
						}
					}
					return calls, results, r.Problem
				}
			}
			for n := range 2 {
				reply, err := m.Generate(context.Background(), msgs, nil)
				if err != nil {
					t.Fatalf("Generate() = %v", err)
				}
				if reply.Content != "done" {
					t.Errorf("reply = %q, want %q", reply.Content, "done")
				}
				sentCalls, results, problem := sent(n)
				if problem != "" {
					t.Fatalf("the server refused the request: %s", problem)
				}
				if len(sentCalls) != len(tt.ids) || len(results) != len(tt.ids) {
					t.Fatalf("sent calls %v and results %v, want %d of each", sentCalls, results, len(tt.ids))
				}
				for i, id := range tt.ids {
					if name := sentCalls[id]; contains(tt.keep, id) != (name == fmt.Sprintf("tool%d", i)) {
						t.Errorf("call %q sent as %v: kept = %v, want %v", id, sentCalls, name != "", contains(tt.keep, id))
					}
				}
				for id, name := range sentCalls {
					want := "result of " + name
					if tt.provider == "anthropic" && name == "tool1" { // the failed call: Kimi's
						want += " (error)"
					}
					if results[id] != want {
						t.Errorf("result sent for call %q (%s) = %q, want %q", id, name, results[id], want)
					}
				}
				if n == 1 {
					first, _, _ := sent(0)
					if !maps.Equal(first, sentCalls) {
						t.Errorf("the second request sent the calls as %v, the first as %v: want the same IDs", sentCalls, first)
					}
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// A server that starts its call IDs again at each request (text-
// generation-inference's every call is "0") makes a call whose ID the
// conversation already has: the reply's call gets one of its own, so the
// conversation stays one that OpenAI and Anthropic take (they refuse two
// calls of one ID) and each result answers its own call.
func TestRepeatedCallIDs(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("And now the other.", llmtest.Call("0", "lookup", `{"n":2}`)))
	m := newOpenAI(t, srv)
	first := llmtest.Call("0", "lookup", `{"n":1}`)
	msgs := []llm.Message{user("look both up"), llmtest.Reply("First.", first), llmtest.Result(first, "one")}
	reply, err := m.Generate(context.Background(), msgs, nil)
	if err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	if len(reply.ToolCalls) != 1 || reply.ToolCalls[0].ID == "0" || !madeUpID.MatchString(reply.ToolCalls[0].ID) {
		t.Fatalf("reply calls = %+v, want one call with an ID of its own", reply.ToolCalls)
	}
	// Streamed, the same.
	srv.Then(llmtest.Reply("And now the other.", llmtest.Call("0", "lookup", `{"n":2}`)))
	streamed, err := llm.Stream(context.Background(), m, msgs, nil, func(context.Context, string) error { return nil })
	if err != nil || len(streamed.ToolCalls) != 1 || streamed.ToolCalls[0].ID != reply.ToolCalls[0].ID {
		t.Fatalf("streamed reply = %+v, %v; want the call under %q", streamed.ToolCalls, err, reply.ToolCalls[0].ID)
	}
	msgs = append(msgs, reply, llmtest.Result(reply.ToolCalls[0], "two"))

	openai := llmtest.NewOpenAIServer(t, llmtest.Reply("done"))
	if _, err := newOpenAI(t, openai).Generate(context.Background(), msgs, nil); err != nil {
		t.Errorf("OpenAI refused the conversation: %v", err)
	}
	anthropic := llmtest.NewAnthropicServer(t, llmtest.Reply("done"))
	a, err := llm.NewAnthropic(llm.AnthropicOptions{BaseURL: anthropic.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Generate(context.Background(), msgs, nil); err != nil {
		t.Errorf("Anthropic refused the conversation: %v", err)
	}
}

// Mistral's API takes only call IDs of nine letters and digits: a
// conversation begun with another provider goes on there with its calls
// under such IDs, each result with its call; and Mistral's own go as
// they are.
func TestCallIDsToMistral(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("done"))
	srv.ActAsMistral()
	addr := strings.TrimPrefix(strings.TrimSuffix(srv.URL(), "/v1"), "http://")
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr) // api.mistral.ai is the fake
	}}}
	m, err := llm.NewOpenAI(llm.OpenAIOptions{APIKey: "k", BaseURL: "http://api.mistral.ai/v1", Model: "mistral-large-latest", HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := llmtest.Call("toolu_01A09q90qw90lq917835lq9", "tool0", `{}`), llmtest.Call("call_abc", "tool1", `{}`), llmtest.Call("D681PevKs", "tool2", `{}`)
	msgs := []llm.Message{user("go"), llmtest.Reply("", a, b, c),
		llmtest.Result(a, "result of tool0"), llmtest.Result(b, "result of tool1"), llmtest.Result(c, "result of tool2")}
	if _, err := m.Generate(context.Background(), msgs, nil); err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	r := srv.Requests()[0]
	names, results := map[string]string{}, map[string]string{}
	for _, msg := range r.Messages {
		for _, tc := range msg.ToolCalls {
			names[tc.ID] = tc.Function.Name
		}
		if msg.Role == "tool" {
			results[msg.ToolCallID] = msg.Text()
		}
	}
	if names["D681PevKs"] != "tool2" {
		t.Errorf("calls sent = %v, want Mistral's own ID kept", names)
	}
	for id, name := range names {
		if results[id] != "result of "+name {
			t.Errorf("result sent for %q (%s) = %q", id, name, results[id])
		}
	}
}
