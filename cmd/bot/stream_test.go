package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui/slackuitest"
)

const streamedAnswer = "The weather in Oslo is sunny today, with a light wind from the west."

// shown reports whether some message the bot made (posted or streamed)
// now shows exactly text.
func shown(s *slacktest.Server, text string) bool {
	for _, c := range s.Calls() {
		if !c.OK() || (c.Method != "chat.postMessage" && c.Method != "chat.startStream") {
			continue
		}
		if m, ok := s.Message(c.Channel, c.TS); ok && m.Text == text {
			return true
		}
	}
	return false
}

// waitShown waits (from the fake model's goroutine) until text is shown.
func waitShown(s *slacktest.Server, text string) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if shown(s, text) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// restartWith restarts the bot with more environment.
func (h *harness) restartWith(env ...string) {
	h.t.Helper()
	h.stop()
	h.env = append(h.env, env...)
	h.start()
}

// threadTexts are the thread's messages as a person sees them now.
func (h *harness) threadTexts(root slacktest.Call) []string {
	var out []string
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		latest, _ := h.slack.Message(c.Channel, c.TS)
		out = append(out, latest.Text)
	}
	return out
}

// TestAnswerStreamsToSlack: through the real binary, with the OpenAI fake
// streaming, the answer grows in one Slack message, word by word, and the
// final answer finishes that message rather than being posted again.
func TestAnswerStreamsToSlack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     []string
		changes string
	}{
		{"streaming methods", nil, "chat.appendStream"},
		{"post and update", []string{"SLACK_STREAMING=update"}, "chat.update"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "", llmtest.Reply(streamedAnswer))
			h.restartWith(append(tt.env, "SLACK_STREAM_INTERVAL=1ms")...)
			// The model sends its next word only once Slack shows the
			// text so far: every word is an update a person sees.
			var mu sync.Mutex
			var seen []string
			h.model.OnChunk(func(_, chunk int, text string) {
				mu.Lock()
				defer mu.Unlock()
				if chunk > 0 && !waitShown(h.slack, seen[len(seen)-1]) {
					t.Errorf("Slack never showed %q while the answer streamed", seen[len(seen)-1])
				}
				seen = append(seen, text)
			})
			h.command("weather in Oslo?", nil, nil)
			root := h.root(1)
			// The last word can be shown before the stream is stopped:
			// wait for both.
			h.eventually(func() bool {
				texts := h.threadTexts(root)
				m := h.slack.Messages(root.Channel, root.TS)
				return len(texts) > 0 && texts[len(texts)-1] == streamedAnswer &&
					len(m) > 0 && !h.slack.Streaming(m[len(m)-1].Channel, m[len(m)-1].TS)
			}, "the final answer in the thread, its stream stopped")
			if texts := h.threadTexts(root); len(texts) != 1 {
				t.Errorf("thread = %q, want the answer once, in one message", texts)
			}
			words := len(strings.Fields(streamedAnswer))
			if n := len(h.slack.CallsTo(tt.changes)); n < words-2 {
				t.Errorf("%d calls to %s for %d words, want the answer shown as it grew", n, tt.changes, words)
			}
			for _, c := range h.slack.CallsTo("chat.postMessage") {
				if c.Text == streamedAnswer {
					t.Errorf("the answer was posted again: %+v", c)
				}
			}
		})
	}
}

// TestStreamCutOffByACrash: the bot dies (SIGKILL) while the answer
// streams; the next process asks the model again, finishes the half
// message with a note, and shows the answer once, below it.
func TestStreamCutOffByACrash(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", llmtest.Reply(streamedAnswer), llmtest.Reply(streamedAnswer))
	h.restartWith("SLACK_STREAM_INTERVAL=1ms")
	cut := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var once sync.Once
	h.model.OnChunk(func(request, chunk int, text string) {
		if request == 1 && chunk == 3 {
			once.Do(func() { close(cut) })
			<-release // the process dies with the model mid-answer
		}
	})
	h.command("weather in Oslo?", nil, nil)
	root := h.root(1)
	<-cut
	partial := "The weather in "
	h.eventually(func() bool { return shown(h.slack, partial) }, "the partial answer %q", partial)
	h.kill()
	h.start()
	// The run is carried on once the dead process's lease has run out
	// and the recovery wake-up comes (about 20s).
	deadline := time.Now().Add(60 * time.Second)
	texts := h.threadTexts(root)
	for !(len(texts) == 2 && texts[1] == streamedAnswer) {
		if time.Now().After(deadline) {
			t.Fatalf("thread = %q, want the cut-off answer and the answer below it", texts)
		}
		time.Sleep(50 * time.Millisecond)
		texts = h.threadTexts(root)
	}
	if want := partial + "… (interrupted; the answer continues below)"; texts[0] != want {
		t.Errorf("the cut-off message shows %q, want %q", texts[0], want)
	}
	if n := len(h.model.Requests()); n != 2 {
		t.Errorf("the model was asked %d times, want 2 (the cut-off answer and its re-run)", n)
	}
}

// TestStreamedAnswerHasNoDisguisedLink: with Slack's streaming methods
// (the default), the answer goes out as Markdown; a link planted in it
// whose label is one URL and whose target another is never live, while
// the answer grows or once it is complete, and the thread shows the text
// as the model wrote it.
func TestStreamedAnswerHasNoDisguisedLink(t *testing.T) {
	t.Parallel()
	const answer = "Your session expired. Log in again at [https://sso.corp.example/login](https://evil.example/login) and retry."
	h := newHarness(t, "", llmtest.Reply(answer))
	h.command("why did the deploy fail?", nil, nil)
	root := h.root(1)
	h.eventually(func() bool {
		m := h.slack.Messages(root.Channel, root.TS)
		return len(m) == 1 && m[0].Method == "chat.startStream" && !h.slack.Streaming(m[0].Channel, m[0].TS) &&
			strings.HasSuffix(m[0].Text, "retry.")
	}, "the streamed answer, its stream stopped")
	sent := 0
	for _, c := range h.slack.Calls() {
		md, ok := c.Params["markdown_text"]
		if !ok {
			continue
		}
		sent++
		if live := slackuitest.Markdown(md); live != nil {
			t.Errorf("%s sent markdown_text %q; live: %v", c.Method, md, live)
		}
	}
	if sent == 0 {
		t.Fatal("no markdown_text was sent: the answer did not stream")
	}
	texts := h.threadTexts(root)
	if live := slackuitest.Markdown(texts[0]); live != nil {
		t.Errorf("the thread shows %q; live: %v", texts[0], live)
	}
	if got := strings.ReplaceAll(texts[0], "\u200b", ""); got != answer {
		t.Errorf("the thread shows %q, want the answer as written, %q", got, answer)
	}
}

// TestStreamStartedWithoutTS: Slack answers chat.startStream without a
// ts; the bot posts the answer instead and never calls the streaming
// methods on that posted message; the answer is complete in the thread.
func TestStreamStartedWithoutTS(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", llmtest.Reply(streamedAnswer))
	h.slack.StartStreamWithoutTS(1)
	h.command("weather in Oslo?", nil, nil)
	root := h.root(1)
	h.eventually(func() bool {
		texts := h.threadTexts(root)
		return len(texts) == 1 && texts[0] == streamedAnswer
	}, "the answer, complete, in the thread")
	posted := h.slack.Messages(root.Channel, root.TS)[0]
	if posted.Method != "chat.postMessage" {
		t.Fatalf("the answer's message was made by %s, want chat.postMessage", posted.Method)
	}
	for _, method := range []string{"chat.appendStream", "chat.stopStream"} {
		for _, c := range h.slack.CallsTo(method) {
			if c.TS == posted.TS {
				t.Errorf("%s called on the message posted with chat.postMessage", method)
			}
		}
	}
}
