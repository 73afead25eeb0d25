package llm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// continued is a fake provider with a client that continues cut-off
// answers, as FromEnv builds it.
type continued struct {
	name string
	recorded
	// last returns the role and text of each message of request n
	// (from 0).
	messages func(n int) [][2]string
	// cut is the provider's recording of an answer cut off at the
	// length limit, without its extension.
	cut string
	// rest is how the provider's model goes on: after a prefill, with
	// the space that comes next; asked in a new turn, without.
	rest string
}

func continuedProviders(t *testing.T) []continued {
	oa := llmtest.NewOpenAIServer(t)
	om, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: oa.URL()})
	if err != nil {
		t.Fatal(err)
	}
	an := llmtest.NewAnthropicServer(t)
	am, err := llm.NewAnthropic(llm.AnthropicOptions{BaseURL: an.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return []continued{
		{
			name: "openai",
			recorded: recorded{model: llm.Continue(llm.Retry(om, llm.RetryOptions{}), false), then: oa.ThenRaw, thenMsg: oa.Then,
				requests: func() int { return len(oa.Requests()) }},
			messages: func(n int) [][2]string {
				var out [][2]string
				for _, m := range oa.Requests()[n].Messages {
					out = append(out, [2]string{m.Role, m.Text()})
				}
				return out
			},
			cut: "openai-length", rest: "restart it; third, start it again.",
		},
		{
			name: "anthropic",
			recorded: recorded{model: llm.Continue(llm.Retry(am, llm.RetryOptions{}), true), then: an.ThenRaw, thenMsg: an.Then,
				requests: func() int { return len(an.Requests()) }},
			messages: func(n int) [][2]string {
				var out [][2]string
				for _, m := range an.Requests()[n].Messages {
					var text strings.Builder
					for _, b := range m.Content {
						text.WriteString(b.Text)
					}
					out = append(out, [2]string{m.Role, text.String()})
				}
				return out
			},
			cut: "anthropic-max-tokens", rest: " restart it; third, start it again.",
		},
	}
}

const (
	cutText  = "The three steps are: first, stop the service; second,"
	wholeCut = cutText + " restart it; third, start it again."
)

// An answer cut off at the length limit is continued once, as each
// provider allows, and read as one answer: streamed, it only grows.
func TestCutOffAnswerIsContinued(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		for _, p := range continuedProviders(t) {
			ext := ".json"
			if stream {
				ext = ".sse"
			}
			t.Run(p.name+ext, func(t *testing.T) {
				p.then(llmtest.Recording(t, p.cut+ext))
				p.thenMsg(llmtest.Reply(p.rest))
				reply, texts, err := ask(context.Background(), p.model, stream)
				if err != nil {
					t.Fatal(err)
				}
				if reply.Content != wholeCut || reply.Stop != "" {
					t.Errorf("reply = %q (stop %q), want %q complete", reply.Content, reply.Stop, wholeCut)
				}
				if n := p.requests(); n != 2 {
					t.Fatalf("%d requests, want the answer and its continuation", n)
				}
				msgs := p.messages(1)
				want := [][2]string{{"user", "go"}, {"assistant", cutText}}
				if p.name == "openai" {
					want = append(want, [2]string{"user", llm.ContinuePrompt})
				}
				if len(msgs) != len(want) {
					t.Fatalf("the continuation asked with %q, want %q", msgs, want)
				}
				for i := range want {
					if msgs[i] != want[i] {
						t.Errorf("the continuation's message %d = %q, want %q", i, msgs[i], want[i])
					}
				}
				if !stream {
					return
				}
				for i := 1; i < len(texts); i++ {
					if !strings.HasPrefix(texts[i], texts[i-1]) {
						t.Errorf("streamed %q after %q: the text went back", texts[i], texts[i-1])
					}
				}
				if len(texts) == 0 || texts[len(texts)-1] != wholeCut {
					t.Errorf("streamed %q, want it to end with the whole answer", texts)
				}
			})
		}
	}
}

// An answer cut off again keeps its note and is not continued a second
// time; a cut-off tool call is never continued.
func TestCutOffAnswerIsContinuedOnce(t *testing.T) {
	t.Parallel()
	for _, p := range continuedProviders(t) {
		t.Run(p.name, func(t *testing.T) {
			p.then(llmtest.Recording(t, p.cut+".json"), llmtest.Recording(t, p.cut+".json"))
			reply, _, err := ask(context.Background(), p.model, false)
			if err != nil {
				t.Fatal(err)
			}
			if n := p.requests(); n != 2 {
				t.Errorf("%d requests, want the answer and one continuation", n)
			}
			if reply.Stop != llm.StopCutOff || !strings.HasSuffix(reply.Content, "\n\n"+llm.NoteCutOff) ||
				strings.Count(reply.Content, cutText) != 2 || strings.Count(reply.Content, llm.NoteCutOff) != 1 {
				t.Errorf("reply = %q (stop %q), want both parts and the note once", reply.Content, reply.Stop)
			}
		})
	}
	calls := map[string]string{"openai": "openai-length-call.json", "anthropic": "anthropic-max-tokens-call.json"}
	for _, p := range continuedProviders(t) {
		t.Run(p.name+" call", func(t *testing.T) {
			p.then(llmtest.Recording(t, calls[p.name]))
			reply, _, err := ask(context.Background(), p.model, false)
			if err != nil {
				t.Fatal(err)
			}
			if n := p.requests(); n != 1 || reply.Stop != llm.StopCutOff || len(reply.ToolCalls) != 1 || !reply.ToolCalls[0].Truncated {
				t.Errorf("%d requests, reply %+v; want one request and the cut-off call as it was", n, reply)
			}
		})
	}
}

// A continuation that fails leaves the cut-off answer as it was.
func TestFailedContinuationKeepsTheAnswer(t *testing.T) {
	t.Parallel()
	for _, p := range continuedProviders(t) {
		t.Run(p.name, func(t *testing.T) {
			p.then(llmtest.Recording(t, p.cut+".json"), llmtest.Raw{Status: 400, Body: `{"error":{"message":"no","type":"invalid_request_error"}}`})
			reply, _, err := ask(context.Background(), p.model, false)
			if err != nil {
				t.Fatal(err)
			}
			if want := cutText + "\n\n" + llm.NoteCutOff; reply.Content != want || reply.Stop != llm.StopCutOff {
				t.Errorf("reply = %q (stop %q), want %q", reply.Content, reply.Stop, want)
			}
		})
	}
}

// An answer cut off because the conversation filled the context window
// is not continued: the continuation would not fit either. The person
// reads the answer as far as it went and why it stops there.
func TestContextFullAnswerIsNotContinued(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		p := continuedProviders(t)[1] // Anthropic says so
		ext := ".json"
		if stream {
			ext = ".sse"
		}
		t.Run(p.name+ext, func(t *testing.T) {
			p.then(llmtest.Recording(t, "anthropic-context-window"+ext))
			reply, _, err := ask(context.Background(), p.model, stream)
			if err != nil {
				t.Fatal(err)
			}
			if n := p.requests(); n != 1 {
				t.Errorf("%d requests, want the answer alone", n)
			}
			if want := cutText + "\n\n" + llm.NoteContextFull; reply.Content != want || reply.Stop != llm.StopContextFull {
				t.Errorf("reply = %q (stop %q), want %q", reply.Content, reply.Stop, want)
			}
		})
	}
}
