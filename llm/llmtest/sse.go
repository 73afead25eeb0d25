package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// ChunkHook is called by a fake server before it writes each text chunk
// of a streamed reply: request is the request's number (1-based), chunk
// the chunk's (0-based), text the reply's text up to and including the
// chunk. A test may block in it to hold a stream where it wants it, or
// record it. It runs on the server's goroutine for that request.
type ChunkHook func(request, chunk int, text string)

// OnChunk sets the hook called before each streamed text chunk (nil:
// none).
func (s *OpenAIServer) OnChunk(h ChunkHook) { s.script.setHook(h) }

func (s *script) setHook(h ChunkHook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

func (s *script) chunkHook() ChunkHook {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hook
}

// textChunks splits a reply's text the way models stream it: a word at a
// time, each with the white space that follows it.
func textChunks(s string) []string {
	var chunks []string
	start := 0
	for i := 1; i < len(s); i++ {
		if isSpace(s[i-1]) && !isSpace(s[i]) {
			chunks = append(chunks, s[start:i])
			start = i
		}
	}
	if start < len(s) {
		chunks = append(chunks, s[start:])
	}
	return chunks
}

func isSpace(b byte) bool { return b == ' ' || b == '\n' || b == '\t' }

// argumentChunks splits a call's JSON arguments into pieces of a few
// bytes, as the APIs stream them. A piece may end inside an escape
// (`\` then `n`), as a real stream's may, but never inside a character:
// each piece goes out as a JSON string, which holds whole characters
// only, so a cut there would reach the client as U+FFFD.
func argumentChunks(args string) []string {
	const size = 8
	var chunks []string
	for len(args) > size {
		cut := size
		for cut < len(args) && !utf8.RuneStart(args[cut]) {
			cut++
		}
		chunks = append(chunks, args[:cut])
		args = args[cut:]
	}
	return append(chunks, args)
}

// sse writes server-sent events and flushes each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// event writes one event; name "" writes a data line only (OpenAI's
// form).
func (e *sse) event(name string, data any) {
	raw, _ := json.Marshal(data)
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", raw)
	if e.f != nil {
		e.f.Flush()
	}
}

func (e *sse) done() {
	fmt.Fprint(e.w, "data: [DONE]\n\n")
	if e.f != nil {
		e.f.Flush()
	}
}

// streamOpenAI answers a streaming request with chat.completion.chunk
// events: the role, the text a word at a time, each tool call's id and
// name and then its arguments in pieces, the finish reason, the usage
// (when stream_options.include_usage asks for it), and [DONE].
func (s *OpenAIServer) streamOpenAI(w http.ResponseWriter, n int, model string, resp map[string]any, usage bool) {
	choice := resp["choices"].([]map[string]any)[0]
	msg := choice["message"].(map[string]any)
	content, _ := msg["content"].(string)
	calls, _ := msg["tool_calls"].([]OpenAIToolCall)
	out := newSSE(w)
	chunk := func(delta map[string]any, finish any) {
		out.event("", map[string]any{
			"id": fmt.Sprintf("chatcmpl-llmtest-%d", n), "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	hook := s.script.chunkHook()
	var text strings.Builder
	for i, c := range textChunks(content) {
		text.WriteString(c)
		if hook != nil {
			hook(n, i, text.String())
		}
		chunk(map[string]any{"content": c}, nil)
	}
	for i, tc := range calls {
		chunk(map[string]any{"tool_calls": []map[string]any{{
			"index": i, "id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Function.Name, "arguments": ""},
		}}}, nil)
		for _, piece := range argumentChunks(tc.Function.Arguments) {
			chunk(map[string]any{"tool_calls": []map[string]any{{
				"index": i, "function": map[string]any{"arguments": piece},
			}}}, nil)
		}
	}
	chunk(map[string]any{}, choice["finish_reason"])
	if usage {
		out.event("", map[string]any{
			"id": fmt.Sprintf("chatcmpl-llmtest-%d", n), "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{}, "usage": resp["usage"],
		})
	}
	out.done()
}

// streamAnthropic answers a streaming request with Anthropic's events:
// message_start, then per content block content_block_start, its deltas
// (thinking_delta a word at a time then signature_delta, text_delta a
// word at a time, input_json_delta in pieces; a redacted_thinking block
// has none) and
// content_block_stop, then message_delta with the stop reason and
// message_stop. As the real API does, message_start reports the input
// tokens (and one output token), message_delta the output tokens.
func (s *AnthropicServer) streamAnthropic(w http.ResponseWriter, n int, model string, resp map[string]any) {
	usage, _ := resp["usage"].(map[string]int)
	out := newSSE(w)
	out.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": resp["id"], "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]int{"input_tokens": usage["input_tokens"], "output_tokens": min(usage["output_tokens"], 1)},
	}})
	out.event("ping", map[string]any{"type": "ping"})
	hook := s.script.chunkHook()
	chunkNo := 0
	var text strings.Builder
	for i, block := range resp["content"].([]map[string]any) {
		switch block["type"] {
		case "thinking":
			out.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "thinking", "thinking": ""}})
			for _, c := range textChunks(block["thinking"].(string)) {
				out.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "thinking_delta", "thinking": c}})
			}
			out.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "signature_delta", "signature": block["signature"]}})
		case "redacted_thinking":
			out.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "redacted_thinking", "data": block["data"]}})
		case "text":
			out.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			for _, c := range textChunks(block["text"].(string)) {
				text.WriteString(c)
				if hook != nil {
					hook(n, chunkNo, text.String())
				}
				chunkNo++
				out.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": c}})
			}
		case "tool_use":
			out.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}})
			args, _ := json.Marshal(block["input"])
			for _, piece := range argumentChunks(string(args)) {
				out.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		out.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	out.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": resp["stop_reason"], "stop_sequence": nil}, "usage": map[string]int{"output_tokens": usage["output_tokens"]}})
	out.event("message_stop", map[string]any{"type": "message_stop"})
}
