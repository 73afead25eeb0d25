package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// temperatureOf returns the temperature of a request body, or nil.
func temperatureOf(t *testing.T, body json.RawMessage) *float64 {
	t.Helper()
	var req struct {
		Temperature *float64 `json:"temperature"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	return req.Temperature
}

// A reasoning model never gets a temperature (the fake refuses it as
// OpenAI does); LLM_TEMPERATURE unset sends none at all; set, it is sent
// to the models that take it.
func TestTemperatureFitsTheModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider, model, temperature string
		want                         *float64
	}{
		{"openai", "o4-mini", "", nil},
		{"openai", "o4-mini", "0.2", nil},
		{"openai", "o1", "0", nil},
		{"openai", "o3-mini-2025-01-31", "0", nil},
		{"openai", "gpt-5-mini", "0.7", nil},
		{"openai", "gpt-4o-mini", "", nil},
		{"openai", "gpt-4o-mini", "0", ptr(0)},
		{"openai", "gpt-4o-mini", "0.2", ptr(0.2)},
		{"anthropic", "claude-sonnet-4-5", "", nil},
		{"anthropic", "claude-sonnet-4-5", "0.5", ptr(0.5)},
	}
	for _, tt := range tests {
		t.Run(tt.provider+" "+tt.model+" "+tt.temperature, func(t *testing.T) {
			env := map[string]string{"LLM_PROVIDER": tt.provider, "LLM_MODEL": tt.model, "LLM_TEMPERATURE": tt.temperature}
			var bodies func() []json.RawMessage
			if tt.provider == "openai" {
				srv := llmtest.NewOpenAIServer(t, llmtest.Reply("ok"), llmtest.Reply("ok"))
				env["OPENAI_BASE_URL"] = srv.URL()
				bodies = func() (out []json.RawMessage) {
					for _, r := range srv.Requests() {
						out = append(out, r.Body)
					}
					return out
				}
			} else {
				srv := llmtest.NewAnthropicServer(t, llmtest.Reply("ok"), llmtest.Reply("ok"))
				env["ANTHROPIC_BASE_URL"] = srv.URL()
				bodies = func() (out []json.RawMessage) {
					for _, r := range srv.Requests() {
						out = append(out, r.Body)
					}
					return out
				}
			}
			m, err := llm.FromEnv(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			msgs := []llm.Message{user("hi")}
			if _, err := m.Generate(context.Background(), msgs, nil); err != nil {
				t.Fatalf("Generate() = %v", err)
			}
			if _, err := llm.Stream(context.Background(), m, msgs, nil, func(context.Context, string) error { return nil }); err != nil {
				t.Fatalf("Stream() = %v", err)
			}
			for i, b := range bodies() {
				got := temperatureOf(t, b)
				if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
					t.Errorf("request %d temperature = %v, want %v", i+1, show(got), show(tt.want))
				}
			}
		})
	}
	for _, env := range []map[string]string{
		{"OPENAI_API_KEY": "sk-1", "LLM_TEMPERATURE": "warm"},
		{"OPENAI_API_KEY": "sk-1", "LLM_TEMPERATURE": "2.5"},
		{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_TEMPERATURE": "1.5"},
	} {
		if _, err := llm.FromEnv(func(k string) string { return env[k] }); err == nil {
			t.Errorf("FromEnv(%v) error = nil, want one", env)
		}
	}
}

func ptr(f float64) *float64 { return &f }

func show(f *float64) any {
	if f == nil {
		return "none"
	}
	return *f
}

// Anthropic is told which tool results report a failure.
func TestAnthropicIsError(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("ok"))
	m, err := llm.NewAnthropic(llm.AnthropicOptions{BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	a, b := llmtest.Call("toolu_a", "f", `{}`), llmtest.Call("toolu_b", "f", `{}`)
	msgs := []llm.Message{user("go"), llmtest.Reply("", a, b),
		{Role: llm.RoleTool, ToolCallID: "toolu_a", Name: "f", Content: "fine"},
		{Role: llm.RoleTool, ToolCallID: "toolu_b", Name: "f", Content: "Error: it broke", IsError: true}}
	if _, err := m.Generate(context.Background(), msgs, nil); err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	got := map[string]bool{}
	for _, blk := range srv.Requests()[0].Messages[2].Content {
		got[blk.ToolUseID] = blk.IsError
	}
	if got["toolu_a"] || !got["toolu_b"] {
		t.Errorf("is_error sent = %v, want only toolu_b", got)
	}
}

// A reasoning model the bot does not know by its name (an Azure
// deployment named by its owner, a family newer than the bot) refuses
// LLM_TEMPERATURE with a 400: the request is sent again without it, and
// so is every later one, rather than every conversation failing until
// the operator unsets it. The operator is told once.
func TestTemperatureRefusedByAnUnknownReasoningModel(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("first"), llmtest.Reply("second"), llmtest.Reply("third"))
	srv.Reasoning("prod-reasoner")
	log, hook := test.NewNullLogger()
	env := map[string]string{"OPENAI_BASE_URL": srv.URL(), "LLM_MODEL": "prod-reasoner", "LLM_TEMPERATURE": "0.2"}
	m, err := llm.FromEnvWithLogger(func(k string) string { return env[k] }, log)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []llm.Message{user("hi")}
	if got, err := m.Generate(context.Background(), msgs, nil); err != nil || got.Content != "first" {
		t.Fatalf("Generate() = %q, %v; want the first reply", got.Content, err)
	}
	got, err := llm.Stream(context.Background(), m, msgs, nil, func(context.Context, string) error { return nil })
	if err != nil || got.Content != "second" {
		t.Fatalf("Stream() = %q, %v; want the second reply", got.Content, err)
	}
	var temps []any
	for _, r := range srv.Requests() {
		temps = append(temps, show(temperatureOf(t, r.Body)))
	}
	if want := []any{0.2, "none", "none"}; fmt.Sprint(temps) != fmt.Sprint(want) {
		t.Errorf("temperatures sent = %v, want %v (refused once, then never sent)", temps, want)
	}
	if warned := warnings(hook, "temperature"); warned != 1 {
		t.Errorf("%d warnings about the temperature, want 1", warned)
	}

	// Another 400 is not taken for it.
	srv2 := llmtest.NewOpenAIServer(t)
	srv2.ThenRaw(llmtest.Raw{Status: 400, Body: `{"error":{"message":"Invalid value for 'top_p'","type":"invalid_request_error","param":"top_p","code":"invalid_value"}}`})
	env["OPENAI_BASE_URL"] = srv2.URL()
	m2, err := llm.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Generate(context.Background(), msgs, nil); err == nil || len(srv2.Requests()) != 1 {
		t.Errorf("Generate() = %v after %d requests, want the refusal after 1", err, len(srv2.Requests()))
	}
}

// OpenAI's reasoning models take the bot's instructions as a developer
// message, the role OpenAI gives them for these models; the instructions
// are never folded into the person's first message (as langchaingo does
// for o1 and o3), where they would carry no more weight than the
// person's words. Other models get a system message; a model behind a
// router ("openai/o3") too, as routers take it for every model.
func TestInstructionsOfAReasoningModel(t *testing.T) {
	t.Parallel()
	tests := []struct{ model, role string }{
		{"o3", "developer"},
		{"o1", "developer"},
		{"o3-mini", "developer"},
		{"o4-mini", "developer"},
		{"gpt-5", "developer"},
		{"gpt-4o-mini", "system"},
		{"openai/o3", "system"},
		{"llama3.1", "system"},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewOpenAIServer(t, llmtest.Reply("a"), llmtest.Reply("b"))
			m, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: srv.URL(), Model: tt.model})
			if err != nil {
				t.Fatal(err)
			}
			call := llmtest.Call("call_1", "lookup", `{}`)
			msgs := []llm.Message{{Role: llm.RoleSystem, Content: "You are Countersign."}, user("hi"),
				llmtest.Reply("", call), llmtest.Result(call, "found"), user("and?")}
			if _, err := m.Generate(context.Background(), msgs, nil); err != nil {
				t.Fatalf("Generate() = %v", err)
			}
			if _, err := llm.Stream(context.Background(), m, msgs, nil, func(context.Context, string) error { return nil }); err != nil {
				t.Fatalf("Stream() = %v", err)
			}
			for i, r := range srv.Requests() {
				var got []string
				for _, msg := range r.Messages {
					got = append(got, msg.Role+": "+msg.Text())
				}
				want := []string{tt.role + ": You are Countersign.", "user: hi", "assistant: ", "tool: found", "user: and?"}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("request %d messages = %q, want %q", i+1, got, want)
				}
			}
		})
	}
}

// A server that refuses stream_options (Mistral's API answers 422
// "Extra inputs are not permitted") is asked again without it, and every
// later streamed request goes without it: the answer streams, only its
// token count is missing. The operator is told once.
func TestStreamOptionsRefused(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("first answer"), llmtest.Reply("second answer"), llmtest.Reply("third answer"))
	srv.ActAsMistral()
	log, hook := test.NewNullLogger()
	env := map[string]string{"OPENAI_BASE_URL": srv.URL(), "OPENAI_API_KEY": "k", "LLM_MODEL": "mistral-large-latest"}
	m, err := llm.FromEnvWithLogger(func(k string) string { return env[k] }, log)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []llm.Message{user("hi")}
	for _, want := range []string{"first answer", "second answer"} {
		var shown string
		got, err := llm.Stream(context.Background(), m, msgs, nil, func(_ context.Context, text string) error { shown = text; return nil })
		if err != nil || got.Content != want || shown != want {
			t.Fatalf("Stream() = %q (shown %q), %v; want %q", got.Content, shown, err, want)
		}
	}
	if got, err := m.Generate(context.Background(), msgs, nil); err != nil || got.Content != "third answer" {
		t.Fatalf("Generate() = %q, %v", got.Content, err)
	}
	var statuses []int
	for _, r := range srv.Requests() {
		statuses = append(statuses, r.Status)
	}
	if fmt.Sprint(statuses) != "[422 200 200 200]" {
		t.Errorf("statuses = %v, want one refusal, then the answers", statuses)
	}
	if warned := warnings(hook, "stream_options"); warned != 1 {
		t.Errorf("%d warnings about stream_options, want 1", warned)
	}
}

// LLM_REASONING_EFFORT is sent as reasoning_effort; a model that refuses
// it (one that does not reason) gets the request again without it, and
// every later one, with one warning. Anthropic is not sent it, and a
// value OpenAI does not have is refused at start.
func TestReasoningEffort(t *testing.T) {
	t.Parallel()
	effortOf := func(body json.RawMessage) any {
		var req struct {
			Effort *string `json:"reasoning_effort"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		if req.Effort == nil {
			return "none sent"
		}
		return *req.Effort
	}
	for _, tt := range []struct {
		model string
		want  []any
	}{
		{"gpt-5-mini", []any{"low", "low"}},
		{"prod-reasoner", []any{"low", "low"}},
		{"gpt-4.1", []any{"low", "none sent", "none sent"}},
	} {
		srv := llmtest.NewOpenAIServer(t, llmtest.Reply("a"), llmtest.Reply("b"))
		srv.Reasoning("prod-reasoner")
		log, hook := test.NewNullLogger()
		env := map[string]string{"OPENAI_BASE_URL": srv.URL(), "LLM_MODEL": tt.model, "LLM_REASONING_EFFORT": "low"}
		m, err := llm.FromEnvWithLogger(func(k string) string { return env[k] }, log)
		if err != nil {
			t.Fatal(err)
		}
		msgs := []llm.Message{user("hi")}
		if _, err := m.Generate(context.Background(), msgs, nil); err != nil {
			t.Fatalf("%s: Generate() = %v", tt.model, err)
		}
		if _, err := llm.Stream(context.Background(), m, msgs, nil, func(context.Context, string) error { return nil }); err != nil {
			t.Fatalf("%s: Stream() = %v", tt.model, err)
		}
		var got []any
		for _, r := range srv.Requests() {
			got = append(got, effortOf(r.Body))
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: reasoning_effort sent = %v, want %v", tt.model, got, tt.want)
		}
		if warned, want := warnings(hook, "LLM_REASONING_EFFORT"), len(tt.want)-2; warned != want {
			t.Errorf("%s: %d warnings, want %d", tt.model, warned, want)
		}
	}

	anthropic := llmtest.NewAnthropicServer(t, llmtest.Reply("ok"))
	env := map[string]string{"LLM_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": anthropic.URL(), "LLM_REASONING_EFFORT": "high"}
	m, err := llm.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("FromEnv(anthropic with LLM_REASONING_EFFORT) = %v, want it ignored", err)
	}
	if _, err := m.Generate(context.Background(), []llm.Message{user("hi")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := effortOf(anthropic.Requests()[0].Body); got != "none sent" {
		t.Errorf("Anthropic was sent reasoning_effort %v", got)
	}
	env = map[string]string{"OPENAI_API_KEY": "sk-1", "LLM_REASONING_EFFORT": "extreme"}
	if _, err := llm.FromEnv(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "LLM_REASONING_EFFORT") {
		t.Errorf("FromEnv(LLM_REASONING_EFFORT=extreme) = %v, want it refused", err)
	}
}

// warnings counts the warnings logged to hook that mention about.
func warnings(hook *test.Hook, about string) int {
	n := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, about) {
			n++
		}
	}
	return n
}
