package llm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tmc/langchaingo/llms"
)

// FuzzReadAnswer reads arbitrary answers, as JSON and as a stream, from
// both providers: never a panic, and a reply read is one the client can
// send back (every call has an ID and a name, of its own; streamed text
// only grows within one answer).
func FuzzReadAnswer(f *testing.F) {
	f.Add("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"a\",\"function\":{\"arguments\":{\"x\":1}}}]},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n", true)
	f.Add("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\"}}\n\ndata: {\"type\":\"message_stop\"}\n", true)
	f.Add(`{"choices":[{"index":0,"message":{"content":null,"refusal":"no","tool_calls":[{"function":{"arguments":"{"}}]},"finish_reason":"length"}]}`, false)
	f.Add(`{"type":"message","content":[{"type":"tool_use","input":{}}],"stop_reason":"max_tokens"}`, false)
	f.Add("data: {\"error\":{\"message\":\"x\",\"code\":\"insufficient_quota\"}}\n\n", true)
	f.Add("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"a\",\"arguments\":\"{}\"}},{\"function\":{\"name\":\"b\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"stop\"}]}\n\n", true)
	f.Add(`{"choices":[{"index":0,"message":{"tool_calls":[{"id":"a","function":{"name":"x","arguments":"{}"}},{"id":"a","function":{"name":"y","arguments":"{}"}}]}}]}`, false)
	f.Add(`{"object":"error","message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","code":400}`, false)
	f.Add("data: {\"error\":\"CUDA out of memory\",\"error_type\":\"generation\"}\n\n", true)
	f.Add("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n"+
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"plan\"}}\n\n"+
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\"}}\n\n"+
		"data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"Emw\"}}\n\n"+
		"data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"x\"}}\n\n"+
		"data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"hi\"}}\n\n"+
		"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"}}\n\ndata: {\"type\":\"message_stop\"}\n\n", true)
	f.Add(`{"type":"message","content":[{"type":"text","text":"Searching. "}],"stop_reason":"pause_turn"}`, false)
	f.Add(`{"type":"message","content":[{"type":"thinking","thinking":"a","signature":""},{"type":"redacted_thinking","data":"d"},{"type":"thinking","thinking":"b","signature":"s"},{"type":"text","text":"t"}],"stop_reason":"end_turn"}`, false)
	f.Fuzz(func(t *testing.T, body string, stream bool) {
		for _, p := range []provider{openAIProvider, anthropicProvider} {
			var last string
			x := &exchange{provider: p, position: 3, used: map[string]bool{"a": true}, fn: func(_ context.Context, text string) error {
				if !strings.HasPrefix(text, last) {
					t.Fatalf("streamed %q after %q", text, last)
				}
				last = text
				return nil
			}}
			ct := "application/json"
			if stream {
				ct = "text/event-stream"
			}
			x.readAnswer(context.Background(), &http.Response{
				StatusCode: 200, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(strings.NewReader(body)),
			})
			if x.err != nil {
				continue
			}
			ids := map[string]bool{}
			for i, c := range x.reply.ToolCalls {
				if c.ID == "" || c.Name == "" {
					t.Fatalf("provider %d: call %d = %+v: no ID or name", p, i, c)
				}
				if x.used[c.ID] || ids[c.ID] {
					t.Fatalf("provider %d: call %d = %+v: an ID the conversation or the reply has already", p, i, c)
				}
				ids[c.ID] = true
			}
			if err := checkMessages([]Message{{Role: RoleUser, Content: "q"}, x.reply}); err != nil {
				t.Fatalf("provider %d: reply %+v cannot be sent back: %v", p, x.reply, err)
			}
			// Thinking is Anthropic's, and only blocks Anthropic takes
			// back: a thinking block with its signature, a redacted one
			// with its data.
			for i, th := range x.reply.Thinking {
				if p != anthropicProvider || (th.Type == ThinkingBlock && th.Signature == "") ||
					(th.Type == RedactedThinkingBlock && th.Data == "") || (th.Type != ThinkingBlock && th.Type != RedactedThinkingBlock) {
					t.Fatalf("provider %d: thinking block %d = %+v", p, i, th)
				}
			}
		}
	})
}

// FuzzNewStatusError reads arbitrary error answers: never a panic, a
// message of bounded length, no negative wait, and a full context window
// only for a 400 or 413.
func FuzzNewStatusError(f *testing.F) {
	f.Add(400, `{"error":{"message":"This model's maximum context length is 8192 tokens.","code":"context_length_exceeded","param":"messages"}}`, "")
	f.Add(400, `{"object":"error","message":"The input (9216 tokens) is longer than the model's context length (8192 tokens).","code":400}`, "")
	f.Add(422, `{"error":"Input validation error","error_type":"validation"}`, "")
	f.Add(429, `{"error":{"message":"slow down","type":"requests","param":null}}`, "Wed, 21 Oct 2015 07:28:00 GMT")
	f.Add(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "2.5")
	f.Add(503, "<html>busy</html>", "-1")
	f.Add(429, "", "1e300")
	now := time.Date(2015, 10, 21, 7, 27, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status int, body, retry string) {
		e := newStatusError(status, http.Header{"Retry-After": {retry}}, []byte(body), now)
		if e.RetryAfter < 0 {
			t.Fatalf("RetryAfter = %v for %q", e.RetryAfter, retry)
		}
		if n := len([]rune(e.Message)); n > 1001 {
			t.Fatalf("message of %d characters", n)
		}
		if e.ContextFull && status != 400 && status != 413 {
			t.Fatalf("ContextFull for HTTP %d", status)
		}
		_ = e.Error()
		_ = e.Transient()
	})
}

// FuzzCallIDs: the ID a call is sent under is one the provider takes,
// the call's own when the provider takes that, and the same every time.
func FuzzCallIDs(f *testing.F) {
	for _, id := range []string{"call_abc", "functions.lookup:0", "chatcmpl-tool-9f1c2b7e4d5a4c3b8e6f0a1b2c3d4e5f", "toolu_01", "", "é"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if m := mistralCallID(id); !mistralCallIDPattern.MatchString(m) || (mistralCallIDPattern.MatchString(id) && m != id) {
			t.Fatalf("mistralCallID(%q) = %q", id, m)
		}
		o, a := openAICallID(id), anthropicCallID(id)
		if len(o) > maxOpenAICallID || (len(id) <= maxOpenAICallID && o != id) || o != openAICallID(id) {
			t.Fatalf("openAICallID(%q) = %q", id, o)
		}
		if !anthropicCallIDPattern.MatchString(a) || (anthropicCallIDPattern.MatchString(id) && a != id) || a != anthropicCallID(id) {
			t.Fatalf("anthropicCallID(%q) = %q", id, a)
		}
	})
}

// FuzzThinkingSentBack: whatever thinking blocks a reply had, the request
// that sends the conversation back to Anthropic holds them unchanged, in
// order, first in the assistant's turn; and text that only looks like
// the block standing for them stays text.
func FuzzThinkingSentBack(f *testing.F) {
	f.Add("plan <a> & \"b\"\n", "EqQBsig+/=", "Emwdata", "Checking.")
	f.Add("", "", "", "thinking 0")
	f.Add("\u2028\xff", "\x00", "\\", "")
	f.Fuzz(func(t *testing.T, text, sig, data, content string) {
		if !utf8.ValidString(text) || !utf8.ValidString(sig) || !utf8.ValidString(data) {
			return // Anthropic's blocks arrive as JSON: valid UTF-8
		}
		blocks := []Thinking{{Type: ThinkingBlock, Text: text, Signature: sig}, {Type: RedactedThinkingBlock, Data: data}}
		msgs := []Message{
			{Role: RoleUser, Content: content},
			{Role: RoleAssistant, Content: content, ToolCalls: []ToolCall{{ID: "toolu_1", Name: "t", Arguments: "{}"}}, Thinking: blocks},
			{Role: RoleTool, ToolCallID: "toolu_1", Name: "t", Content: "ok"},
		}
		marks := newThinkingMarks()
		req, err := toAnthropic(msgs, marks, nil)
		if err != nil {
			t.Fatal(err)
		}
		// What langchaingo writes: one message per part.
		type wire struct {
			Role    string `json:"role"`
			Content []any  `json:"content"`
		}
		var out []wire
		for _, m := range req {
			role := "user"
			if m.Role == "ai" {
				role = "assistant"
			}
			for _, part := range m.Parts {
				switch p := part.(type) {
				case llms.TextContent:
					out = append(out, wire{role, []any{map[string]string{"type": "text", "text": p.Text}}})
				case llms.ToolCall:
					out = append(out, wire{role, []any{map[string]any{"type": "tool_use", "id": p.ID, "name": p.FunctionCall.Name, "input": map[string]any{}}}})
				case llms.ToolCallResponse:
					out = append(out, wire{role, []any{map[string]any{"type": "tool_result", "tool_use_id": p.ToolCallID, "content": p.Content}}})
				}
			}
		}
		body, err := json.Marshal(map[string]any{"messages": out})
		if err != nil {
			t.Fatal(err)
		}
		merged, err := mergeTurns(body, nil, nil, marks)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Messages []struct {
				Role    string `json:"role"`
				Content []struct {
					Type      string  `json:"type"`
					Text      *string `json:"text"`
					Thinking  *string `json:"thinking"`
					Signature *string `json:"signature"`
					Data      *string `json:"data"`
				} `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(merged, &got); err != nil {
			t.Fatal(err)
		}
		for _, m := range got.Messages {
			if m.Role != "assistant" {
				for _, b := range m.Content {
					if b.Type != "text" && b.Type != "tool_result" {
						t.Fatalf("a %s block in the user's turn: %s", b.Type, merged)
					}
				}
				continue
			}
			if len(m.Content) < 2 {
				t.Fatalf("assistant turn %s", merged)
			}
			th, red := m.Content[0], m.Content[1]
			if th.Type != ThinkingBlock || th.Thinking == nil || *th.Thinking != text || th.Signature == nil || *th.Signature != sig || th.Data != nil {
				t.Fatalf("first block sent back: %s", merged)
			}
			if red.Type != RedactedThinkingBlock || red.Data == nil || *red.Data != data || red.Thinking != nil {
				t.Fatalf("second block sent back: %s", merged)
			}
		}
	})
}
