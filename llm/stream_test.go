package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

var (
	_ llm.Streamer = (*llm.OpenAI)(nil)
	_ llm.Streamer = (*llm.Anthropic)(nil)
	_ llm.Streamer = (*llm.Demo)(nil)
)

// streamCase is one reply streamed through a provider's fake.
var streamReplies = []struct {
	name  string
	reply llm.Message
}{
	{"text", llmtest.Reply("The status is 200 and the body says hello, world.")},
	{"text and two calls", llmtest.Reply("Let me check both.", llmtest.Call("call_a", "http_request", argsA), llmtest.Call("call_b", "http_request", argsB))},
	{"calls only", llmtest.Reply("", llmtest.Call("call_a", "http_request", argsA))},
	{"markup and newlines", llmtest.Reply("Line one <!here>\n\n```\ncode\n```\nend")},
	// The fakes stream arguments in pieces of a few bytes: these cross
	// the pieces inside a character of two, three and four bytes and
	// inside escapes, which a real stream carries whole.
	{"arguments beyond ASCII", llmtest.Reply("Posting to Zürich.", llmtest.Call("call_u", "http_request", argsUnicode))},
}

const argsUnicode = `{"body":"éééé 😀😀 ——— \"q\" \\ \u00e9\n","url":"https://a.example/Zürich","method":"POST"}`

// recorder keeps every text a TextFunc is told.
type recorder struct{ texts []string }

func (r *recorder) fn(_ context.Context, text string) error {
	r.texts = append(r.texts, text)
	return nil
}

// checkGrowth asserts what a person watching the stream sees: the text
// grows a word at a time and ends as the reply's text.
func checkGrowth(t *testing.T, texts []string, final string) {
	t.Helper()
	if final == "" {
		if len(texts) != 0 {
			t.Errorf("streamed %q for a reply without text", texts)
		}
		return
	}
	if len(texts) < 2 {
		t.Fatalf("streamed %d texts, want the reply word by word", len(texts))
	}
	for i := 1; i < len(texts); i++ {
		if !strings.HasPrefix(texts[i], texts[i-1]) || texts[i] == texts[i-1] {
			t.Fatalf("text %d = %q does not extend %q", i, texts[i], texts[i-1])
		}
	}
	if last := texts[len(texts)-1]; last != final {
		t.Errorf("last streamed text = %q, want the reply %q", last, final)
	}
}

// streamsAsGenerates checks that m streams the reply it would generate,
// its text growing word by word.
func streamsAsGenerates(t *testing.T, m llm.Streamer, final string) {
	t.Helper()
	conv := []llm.Message{{Role: llm.RoleUser, Content: "Fetch a and post to b."}}
	want, err := m.Generate(context.Background(), conv, testTools)
	if err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	var rec recorder
	got, err := m.GenerateStream(context.Background(), conv, testTools, rec.fn)
	if err != nil {
		t.Fatalf("GenerateStream() error = %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GenerateStream() = %+v, want what Generate returns: %+v", got, want)
	}
	checkGrowth(t, rec.texts, final)
}

func TestOpenAIStreams(t *testing.T) {
	t.Parallel()
	for _, tt := range streamReplies {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewOpenAIServer(t, tt.reply, tt.reply)
			streamsAsGenerates(t, newOpenAI(t, srv), tt.reply.Content)
			reqs := srv.Requests()
			var body struct{ Stream bool }
			_ = json.Unmarshal(reqs[1].Body, &body)
			if !body.Stream {
				t.Errorf("streamed request body = %s, want stream: true", reqs[1].Body)
			}
		})
	}
}

func TestAnthropicStreams(t *testing.T) {
	t.Parallel()
	for _, tt := range streamReplies {
		t.Run(tt.name, func(t *testing.T) {
			streamsAsGenerates(t, newAnthropic(t, llmtest.NewAnthropicServer(t, tt.reply, tt.reply)), tt.reply.Content)
		})
	}
}

// TestStreamStopsOnError: an error from the TextFunc ends the model call
// with that error, and the rest of the reply is not streamed.
func TestStreamStopsOnError(t *testing.T) {
	t.Parallel()
	stop := errors.New("stop here")
	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			reply := llmtest.Reply("one two three four five")
			var m llm.Streamer
			if provider == "openai" {
				m = newOpenAI(t, llmtest.NewOpenAIServer(t, reply))
			} else {
				m = newAnthropic(t, llmtest.NewAnthropicServer(t, reply))
			}
			var texts []string
			_, err := m.GenerateStream(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "count"}}, nil,
				func(_ context.Context, text string) error {
					texts = append(texts, text)
					if len(texts) == 2 {
						return stop
					}
					return nil
				})
			if !errors.Is(err, stop) {
				t.Fatalf("GenerateStream() error = %v, want %v", err, stop)
			}
			if len(texts) != 2 {
				t.Errorf("streamed %q after the error, want 2 texts", texts)
			}
		})
	}
}

// TestRetryStreamsAgain: a retried request streams its reply from the
// start, and the caller gets the reply once.
func TestRetryStreamsAgain(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("after the outage"))
	srv.FailNext(1, 503)
	m := llm.Retry(newOpenAI(t, srv), llm.RetryOptions{Attempts: 3, Sleep: func(context.Context, time.Duration) error { return nil }})
	var rec recorder
	got, err := llm.Stream(context.Background(), m, []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil, rec.fn)
	if err != nil {
		t.Fatalf("Stream() error = %v", err)
	}
	if got.Content != "after the outage" {
		t.Errorf("Stream() = %q, want %q", got.Content, "after the outage")
	}
	checkGrowth(t, rec.texts, "after the outage")
}

// TestStreamFallsBack: a model that cannot stream shows its text once.
func TestStreamFallsBack(t *testing.T) {
	t.Parallel()
	m := llmtest.NewScripted(llmtest.Reply("all at once"))
	var rec recorder
	got, err := llm.Stream(context.Background(), m, []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil, rec.fn)
	if err != nil || got.Content != "all at once" {
		t.Fatalf("Stream() = %q, %v; want %q", got.Content, err, "all at once")
	}
	if !reflect.DeepEqual(rec.texts, []string{"all at once"}) {
		t.Errorf("streamed %q, want the whole text once", rec.texts)
	}
}

// TestDemoStreamsWordByWord: the playground shows the demo's answer grow.
func TestDemoStreamsWordByWord(t *testing.T) {
	t.Parallel()
	d := &llm.Demo{Pause: -1}
	conv := []llm.Message{{Role: llm.RoleUser, Content: "hello"}}
	want, err := d.Generate(context.Background(), conv, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	got, err := d.GenerateStream(context.Background(), conv, nil, rec.fn)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("GenerateStream() = %+v, %v; want %+v", got, err, want)
	}
	checkGrowth(t, rec.texts, want.Content)
	if n := len(strings.Fields(want.Content)); len(rec.texts) != n {
		t.Errorf("streamed %d texts, want one per word (%d)", len(rec.texts), n)
	}
}

// What a reply cost, as each provider reports it in a JSON answer and in
// a stream, reaches the reply (and from there the bot's metrics).
func TestUsageIsRead(t *testing.T) {
	t.Parallel()
	oa := llmtest.NewOpenAIServer(t, llmtest.Reply("one two"), llmtest.Reply("one two"))
	oa.ReportUsage(120, 30)
	an := llmtest.NewAnthropicServer(t, llmtest.Reply("one two"), llmtest.Reply("one two"))
	an.ReportUsage(120, 30)
	for name, m := range map[string]llm.Streamer{"openai": newOpenAI(t, oa), "anthropic": newAnthropic(t, an)} {
		for _, stream := range []bool{false, true} {
			reply, _, err := ask(context.Background(), m, stream)
			if want := (llm.Usage{Input: 120, Output: 30}); err != nil || reply.Usage == nil || *reply.Usage != want {
				t.Errorf("%s (stream %v): usage %+v, %v; want %+v", name, stream, reply.Usage, err, want)
			}
		}
	}
}
