package llm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func readSSE(p provider, body string) (Message, error) {
	x := &exchange{provider: p, position: 1}
	x.readAnswer(context.Background(), &http.Response{StatusCode: 200,
		Header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}, Body: io.NopCloser(strings.NewReader(body))})
	return x.reply, x.err
}

func TestStreamEnds(t *testing.T) {
	t.Parallel()
	const text = `data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}` + "\n\n"
	const finish = `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	tests := []struct {
		name string
		p    provider
		body string
		cut  bool
	}{
		{"openai with [DONE]", openAIProvider, text + finish + "data: [DONE]\n\n", false},
		// Some compatible servers close the stream after the finish
		// reason: everything was sent.
		{"openai finish without [DONE]", openAIProvider, text + finish, false},
		{"openai without finish or [DONE]", openAIProvider, text, true},
		{"openai empty", openAIProvider, "", true},
		{"anthropic without message_stop", anthropicProvider,
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n", true},
		{"anthropic empty turn", anthropicProvider,
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", false},
	}
	for _, tt := range tests {
		_, err := readSSE(tt.p, tt.body)
		var se *StreamError
		if cut := errors.As(err, &se) && se.Cut; cut != tt.cut || (!tt.cut && err != nil) {
			t.Errorf("%s: error = %v, want cut %v", tt.name, err, tt.cut)
		}
	}
}

// Calls from a server that sends no index: a new id is a new call, no id
// continues the last one; a call without an id gets nine letters and
// digits, the same on every read.
func TestCallsWithoutIndex(t *testing.T) {
	t.Parallel()
	body := `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"x\""}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":5,"function":{"name":"h"}}]}}]}` + "\n\n" +
		"data: [DONE]\n\n"
	reply, err := readSSE(openAIProvider, body)
	if err != nil {
		t.Fatal(err)
	}
	calls := reply.ToolCalls
	if len(calls) != 3 || calls[0] != (ToolCall{ID: "a", Name: "f", Arguments: `{"x":1}`}) ||
		calls[1] != (ToolCall{ID: "b", Name: "g", Arguments: `{}`}) || calls[2].Name != "h" {
		t.Fatalf("calls = %+v", calls)
	}
	if !regexp.MustCompile(`^[a-zA-Z0-9]{9}$`).MatchString(calls[2].ID) {
		t.Errorf("made-up ID %q, want nine letters and digits", calls[2].ID)
	}
	again, _ := readSSE(openAIProvider, body)
	if again.ToolCalls[2].ID != calls[2].ID {
		t.Errorf("made-up IDs %q and %q differ between reads", calls[2].ID, again.ToolCalls[2].ID)
	}
	if madeUpCallID(1, 0) == madeUpCallID(1, 1) || madeUpCallID(1, 0) == madeUpCallID(2, 0) {
		t.Errorf("made-up IDs repeat")
	}
}
