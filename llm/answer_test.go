package llm_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// recorded is a fake provider that replays recordings, with a client.
type recorded struct {
	model    llm.Model
	then     func(...llmtest.Raw)
	thenMsg  func(...llm.Message)
	requests func() int
}

func openAIRecorded(t *testing.T, opts llm.OpenAIOptions) recorded {
	srv := llmtest.NewOpenAIServer(t)
	opts.BaseURL = srv.URL()
	m, err := llm.NewOpenAI(opts)
	if err != nil {
		t.Fatal(err)
	}
	return recorded{model: m, then: srv.ThenRaw, thenMsg: srv.Then, requests: func() int { return len(srv.Requests()) }}
}

func anthropicRecorded(t *testing.T) recorded {
	srv := llmtest.NewAnthropicServer(t)
	m, err := llm.NewAnthropic(llm.AnthropicOptions{BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return recorded{model: m, then: srv.ThenRaw, thenMsg: srv.Then, requests: func() int { return len(srv.Requests()) }}
}

// ask sends one question, streaming for a recorded stream, and returns
// the reply and the texts streamed.
func ask(ctx context.Context, m llm.Model, stream bool) (llm.Message, []string, error) {
	msgs := []llm.Message{{Role: llm.RoleUser, Content: "go"}}
	tools := []llm.ToolDef{{Name: "lookup", Parameters: []byte(`{"type":"object","properties":{"n":{"type":"integer"}}}`)},
		{Name: "deploy", Parameters: []byte(`{"type":"object","properties":{"n":{"type":"integer"}}}`)}}
	if !stream {
		reply, err := m.Generate(ctx, msgs, tools)
		return reply, nil, err
	}
	var texts []string
	reply, err := llm.Stream(ctx, m, msgs, tools, func(_ context.Context, text string) error {
		texts = append(texts, text)
		return nil
	})
	return reply, texts, err
}

var madeUpID = regexp.MustCompile(`^[a-zA-Z0-9]{9}$`)

// Each recorded answer, read as the person and the agent need it.
func TestRecordedAnswers(t *testing.T) {
	t.Parallel()
	const cut = "The three steps are: first, stop the service; second,"
	const sorry = "I'm sorry, I can't help with that request."
	tests := []struct {
		provider, recording string
		content             string // the reply's text
		stop                llm.Stop
		calls               []llm.ToolCall
	}{
		{"openai", "openai-length.json", cut + "\n\n" + llm.NoteCutOff, llm.StopCutOff, nil},
		{"openai", "openai-length-call.json", llm.NoteCutOff, llm.StopCutOff,
			[]llm.ToolCall{{ID: "call_Lc2bbbbbbbbbbbbbbbbbbbbb", Name: "lookup", Arguments: `{"n":`, Truncated: true}}},
		{"openai", "openai-length-call.sse", llm.NoteCutOff, llm.StopCutOff,
			[]llm.ToolCall{{ID: "call_Lc1aaaaaaaaaaaaaaaaaaaaa", Name: "lookup", Arguments: `{"n"`, Truncated: true}}},
		{"openai", "openai-content-filter.json", llm.NoteFiltered, llm.StopFiltered, nil},
		// The filter stopped the reply while a call was written: the call
		// is cut off, though what arrived of it is a valid object, and the
		// text says the filter, not the length limit.
		{"openai", "openai-content-filter-call.json", llm.NoteFiltered, llm.StopFiltered,
			[]llm.ToolCall{{ID: "call_Cf2bbbbbbbbbbbbbbbbbbbbb", Name: "lookup", Arguments: `{"n":1}`, Truncated: true}}},
		{"openai", "openai-content-filter-call.sse", llm.NoteFiltered, llm.StopFiltered,
			[]llm.ToolCall{{ID: "call_Cf1aaaaaaaaaaaaaaaaaaaaa", Name: "lookup", Arguments: `{"n":1}`, Truncated: true}}},
		{"openai", "openai-refusal.json", sorry, llm.StopRefused, nil},
		{"openai", "openai-refusal.sse", sorry, llm.StopRefused, nil},
		{"openai", "vllm-repeated-metadata.sse", "", "",
			[]llm.ToolCall{{ID: "chatcmpl-tool-7f3a", Name: "lookup", Arguments: `{"n": 4}`}}},
		{"openai", "interleaved-calls.sse", "", "", []llm.ToolCall{
			{ID: "call_Il0aaaaaaaaaaaaaaaaaaaaa", Name: "lookup", Arguments: `{"n":1}`},
			{ID: "call_Il1bbbbbbbbbbbbbbbbbbbbb", Name: "deploy", Arguments: `{"n":2}`}}},
		{"openai", "llama-object-arguments.sse", "", "", []llm.ToolCall{{Name: "lookup", Arguments: `{"n":3}`}}},
		// Every call of the reply has the same ID: the second gets one of
		// its own.
		{"openai", "xinference-repeated-ids.json", "\n\n", "", []llm.ToolCall{
			{ID: "call_f0de99f4-6fe1-4235-b4d9-1fcb010fa197", Name: "lookup", Arguments: `{"n": 1}`},
			{Name: "deploy", Arguments: `{"n": 2}`}}},
		// Two calls in one chunk, with neither index nor ID, a finish
		// reason "stop", keep-alive comments, a last chunk with the usage
		// only and no [DONE]: two calls.
		{"openai", "noindex-calls.sse", "", "", []llm.ToolCall{
			{Name: "lookup", Arguments: `{"n":1}`},
			{Name: "deploy", Arguments: `{"n":2}`}}},
		{"anthropic", "anthropic-max-tokens.json", cut + "\n\n" + llm.NoteCutOff, llm.StopCutOff, nil},
		{"anthropic", "anthropic-max-tokens-call.json", llm.NoteCutOff, llm.StopCutOff,
			[]llm.ToolCall{{ID: "toolu_rec_cut1", Name: "lookup", Arguments: `{}`, Truncated: true}}},
		{"anthropic", "anthropic-max-tokens-call.sse", llm.NoteCutOff, llm.StopCutOff,
			[]llm.ToolCall{{ID: "toolu_rec_cut2", Name: "lookup", Arguments: `{}`, Truncated: true}}},
		// The conversation filled the context window: a call written then
		// is cut off even when what arrived of it is a valid object.
		{"anthropic", "anthropic-context-window.json", cut + "\n\n" + llm.NoteContextFull, llm.StopContextFull, nil},
		{"anthropic", "anthropic-context-window.sse", cut + "\n\n" + llm.NoteContextFull, llm.StopContextFull, nil},
		{"anthropic", "anthropic-context-window-call.json", "Let me look that up.\n\n" + llm.NoteContextFull, llm.StopContextFull,
			[]llm.ToolCall{{ID: "toolu_rec_cw1", Name: "lookup", Arguments: `{"n":1}`, Truncated: true}}},
		{"anthropic", "anthropic-context-window-call.sse", "Let me look that up.\n\n" + llm.NoteContextFull, llm.StopContextFull,
			[]llm.ToolCall{{ID: "toolu_rec_cw2", Name: "lookup", Arguments: `{"n": 1}`, Truncated: true}}},
		// Thinking, redacted thinking and a block of a type not known yet
		// are not the answer's text; the call after them is read.
		{"anthropic", "anthropic-thinking-call.sse", "Let me look that up.", "",
			[]llm.ToolCall{{ID: "toolu_rec_th1", Name: "lookup", Arguments: `{"n": 1}`}}},
		{"anthropic", "anthropic-thinking-call.json", "Let me look that up.", "",
			[]llm.ToolCall{{ID: "toolu_rec_th2", Name: "lookup", Arguments: `{"n":1}`}}},
		{"anthropic", "anthropic-refusal.json", llm.NoteRefused, llm.StopRefused, nil},
		{"anthropic", "anthropic-refusal.sse", llm.NoteRefused, llm.StopRefused, nil},
		// The model stopped to refuse while it wrote a call: likewise.
		{"anthropic", "anthropic-refusal-call.json", "Let me look that up.\n\n" + llm.NoteRefused, llm.StopRefused,
			[]llm.ToolCall{{ID: "toolu_rec_rf1", Name: "lookup", Arguments: `{"n":1}`, Truncated: true}}},
		{"anthropic", "anthropic-refusal-call.sse", "Let me look that up.\n\n" + llm.NoteRefused, llm.StopRefused,
			[]llm.ToolCall{{ID: "toolu_rec_rf2", Name: "lookup", Arguments: `{"n": 1}`, Truncated: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.recording, func(t *testing.T) {
			var p recorded
			if tt.provider == "openai" {
				p = openAIRecorded(t, llm.OpenAIOptions{})
			} else {
				p = anthropicRecorded(t)
			}
			p.then(llmtest.Recording(t, tt.recording))
			stream := strings.HasSuffix(tt.recording, ".sse")
			reply, texts, err := ask(context.Background(), p.model, stream)
			if err != nil {
				t.Fatalf("reply error = %v", err)
			}
			if reply.Content != tt.content || reply.Stop != tt.stop {
				t.Errorf("reply = %q (stop %q), want %q (stop %q)", reply.Content, reply.Stop, tt.content, tt.stop)
			}
			if len(reply.ToolCalls) != len(tt.calls) {
				t.Fatalf("calls = %+v, want %+v", reply.ToolCalls, tt.calls)
			}
			for i, c := range reply.ToolCalls {
				want := tt.calls[i]
				if want.ID == "" && madeUpID.MatchString(c.ID) {
					want.ID = c.ID
				}
				if c != want {
					t.Errorf("call %d = %+v, want %+v", i, c, want)
				}
			}
			if n := len(texts); n > 0 && !strings.HasPrefix(reply.Content, texts[n-1]) {
				t.Errorf("streamed %q, want the reply's text %q to start with the last", texts, reply.Content)
			}
		})
	}
}

// A stream with an error in it, or one cut short, is a failed request,
// transient like its HTTP equivalent: Retry asks again, and the person
// sees the broken text finished with a note, then the new answer.
func TestBrokenStreamIsRetried(t *testing.T) {
	t.Parallel()
	tests := []struct{ provider, recording, wantErr string }{
		{"openai", "openai-error-midstream.sse", "server_error"},
		{"openai", "tgi-error-midstream.sse", "CUDA out of memory"},
		// Groq refuses a tool call the model wrote wrong: another sample
		// may be right.
		{"openai", "groq-tool-use-failed.sse", "Failed to call a function"},
		{"openai", "openai-cut.sse", "broke off"},
		{"anthropic", "anthropic-overloaded.sse", "overloaded"},
		{"anthropic", "anthropic-cut.sse", "broke off"},
	}
	for _, tt := range tests {
		t.Run(tt.recording, func(t *testing.T) {
			var p recorded
			if tt.provider == "openai" {
				p = openAIRecorded(t, llm.OpenAIOptions{})
			} else {
				p = anthropicRecorded(t)
			}
			// Without retries: the error, never a partial answer.
			p.then(llmtest.Recording(t, tt.recording))
			reply, _, err := ask(context.Background(), p.model, true)
			var se *llm.StreamError
			if !errors.As(err, &se) || !llm.IsTransient(err) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("reply %+v, error %v; want a transient StreamError mentioning %q", reply, err, tt.wantErr)
			}
			// With retries: one answer.
			p.then(llmtest.Recording(t, tt.recording))
			p.thenMsg(llmtest.Reply("The whole answer."))
			m := llm.Retry(p.model, llm.RetryOptions{Sleep: func(context.Context, time.Duration) error { return nil }})
			reply, texts, err := ask(context.Background(), m, true)
			if err != nil || reply.Content != "The whole answer." {
				t.Fatalf("retried reply = %q, %v; want the whole answer", reply.Content, err)
			}
			i := slices.IndexFunc(texts, func(s string) bool { return strings.HasSuffix(s, llm.NoteRetrying) })
			if i < 0 || !strings.HasPrefix(texts[i], "Half of") || texts[len(texts)-1] != "The whole answer." {
				t.Errorf("streamed %q; want the broken text finished with the retry note, then the new answer", texts)
			}
			if n := p.requests(); n != 3 {
				t.Errorf("%d requests, want 3", n)
			}
		})
	}
}

// OpenAI's insufficient_quota 429 is said as such and not retried.
func TestOutOfQuotaIsNotRetried(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		p := openAIRecorded(t, llm.OpenAIOptions{})
		quota := llmtest.Recording(t, "openai-quota.json")
		quota.Status = 429
		p.then(quota)
		p.thenMsg(llmtest.Reply("never"))
		m := llm.Retry(p.model, llm.RetryOptions{Sleep: func(context.Context, time.Duration) error { return nil }})
		_, _, err := ask(context.Background(), m, stream)
		if !errors.Is(err, llm.ErrOutOfQuota) || errors.Is(err, llm.ErrUnavailable) || !strings.Contains(err.Error(), "out of quota") {
			t.Errorf("stream %v: error = %v, want out of quota, not unavailable", stream, err)
		}
		if n := p.requests(); n != 1 {
			t.Errorf("stream %v: %d requests, want 1 (no retry)", stream, n)
		}
	}
}

// A request refused because the conversation no longer fits the model's
// context window is not retried (asking again cannot help), and its
// error says what to do: start a new thread.
func TestContextFullIsNotRetried(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ provider, recording, words string }{
		{"openai", "openai-context-length.json", "maximum context length is 128000 tokens"},
		{"anthropic", "anthropic-prompt-too-long.json", "prompt is too long: 208576 tokens > 200000 maximum"},
		{"openai", "vllm-context-length.json", "maximum context length is 8192 tokens"},
		{"openai", "sglang-context-length.json", "longer than the model's context length (8192 tokens)"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tt.recording, stream), func(t *testing.T) {
				p := anthropicRecorded(t)
				if tt.provider == "openai" {
					p = openAIRecorded(t, llm.OpenAIOptions{})
				}
				refused := llmtest.Recording(t, tt.recording)
				refused.Status = http.StatusBadRequest
				p.then(refused)
				p.thenMsg(llmtest.Reply("never"))
				m := llm.Retry(p.model, llm.RetryOptions{Sleep: func(context.Context, time.Duration) error { return nil }})
				_, _, err := ask(context.Background(), m, stream)
				if !errors.Is(err, llm.ErrContextFull) || errors.Is(err, llm.ErrUnavailable) ||
					!strings.Contains(err.Error(), "start a new thread") || !strings.Contains(err.Error(), tt.words) {
					t.Errorf("error = %v, want one that says the conversation no longer fits, to start a new thread, and the provider's words", err)
				}
				if n := p.requests(); n != 1 {
					t.Errorf("%d requests, want 1 (no retry)", n)
				}
			})
		}
	}
	// Other refusals and failures are not taken for it.
	for _, body := range []string{
		`{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`,
		`{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`,
	} {
		p := openAIRecorded(t, llm.OpenAIOptions{})
		p.then(llmtest.Raw{Status: http.StatusBadRequest, Body: body})
		if _, _, err := ask(context.Background(), p.model, false); err == nil || errors.Is(err, llm.ErrContextFull) {
			t.Errorf("error for %s = %v, want one that is not ErrContextFull", body, err)
		}
	}
}

// Groq's refusal of a reply whose tool call the model wrote wrong (HTTP
// 400 tool_use_failed) is asked again, as another sample may come out
// right; the person gets the answer of the attempt that did.
func TestToolUseFailedIsRetried(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		p := openAIRecorded(t, llm.OpenAIOptions{})
		failed := llmtest.Recording(t, "groq-tool-use-failed.json")
		failed.Status = http.StatusBadRequest
		p.then(failed)
		p.thenMsg(llmtest.Reply("The answer."))
		m := llm.Retry(p.model, llm.RetryOptions{Sleep: func(context.Context, time.Duration) error { return nil }})
		reply, _, err := ask(context.Background(), m, stream)
		if err != nil || reply.Content != "The answer." {
			t.Errorf("stream %v: reply = %q, %v; want the second attempt's answer", stream, reply.Content, err)
		}
		if n := p.requests(); n != 2 {
			t.Errorf("stream %v: %d requests, want 2", stream, n)
		}
	}
}
