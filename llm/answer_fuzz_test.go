package llm

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// FuzzReadAnswer reads arbitrary answers, as JSON and as a stream, from
// both providers: never a panic, and a reply read is one the client can
// send back (every call has an ID and a name; streamed text only grows
// within one answer).
func FuzzReadAnswer(f *testing.F) {
	f.Add("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"a\",\"function\":{\"arguments\":{\"x\":1}}}]},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n", true)
	f.Add("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\"}}\n\ndata: {\"type\":\"message_stop\"}\n", true)
	f.Add(`{"choices":[{"index":0,"message":{"content":null,"refusal":"no","tool_calls":[{"function":{"arguments":"{"}}]},"finish_reason":"length"}]}`, false)
	f.Add(`{"type":"message","content":[{"type":"tool_use","input":{}}],"stop_reason":"max_tokens"}`, false)
	f.Add("data: {\"error\":{\"message\":\"x\",\"code\":\"insufficient_quota\"}}\n\n", true)
	f.Fuzz(func(t *testing.T, body string, stream bool) {
		for _, p := range []provider{openAIProvider, anthropicProvider} {
			var last string
			x := &exchange{provider: p, position: 3, fn: func(_ context.Context, text string) error {
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
			for i, c := range x.reply.ToolCalls {
				if c.ID == "" || c.Name == "" {
					t.Fatalf("provider %d: call %d = %+v: no ID or name", p, i, c)
				}
			}
			if err := checkMessages([]Message{{Role: RoleUser, Content: "q"}, x.reply}); err != nil {
				t.Fatalf("provider %d: reply %+v cannot be sent back: %v", p, x.reply, err)
			}
		}
	})
}
