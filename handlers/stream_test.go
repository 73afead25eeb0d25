package handlers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui/slackuitest"
)

const streamRoot = "1700000000.000001"

// streamWorld is a reporter over the Slack fake and a real store, and the
// ways to make another process's reporter over the same store.
type streamWorld struct {
	slack *slacktest.Server
	store *redisstore.Store
	api   *slack.Client
}

func newStreamWorld(t *testing.T) *streamWorld {
	t.Helper()
	srv := slacktest.NewServer(t)
	return &streamWorld{
		slack: srv,
		store: redisstore.New(redistest.Client(t), redisstore.Options{Prefix: fmt.Sprintf("stream-%d", time.Now().UnixNano())}),
		api:   slack.New("xoxb-test", slack.OptionAPIURL(srv.URL())),
	}
}

// process is one bot process's reporter.
func (w *streamWorld) process(o handlers.StreamOptions) *handlers.Reporter {
	r := handlers.NewReporter(w.api, w.store, nil, nil)
	r.SetStreaming(o)
	return r
}

func thread(channel string) string { return slacktest.TeamID + ":" + channel + ":" + streamRoot }

func report(t *testing.T, r *handlers.Reporter, e runner.Event) {
	t.Helper()
	if e.Thread == "" {
		e.Thread = thread(slacktest.ChannelID)
	}
	if e.State == nil {
		e.State = &agent.State{Requester: "U0ALICE"}
	}
	if err := r.Report(context.Background(), e); err != nil {
		t.Fatalf("Report(%s) = %v", e.Kind, err)
	}
}

// grow reports the answer at message m growing word by word.
func grow(t *testing.T, r *handlers.Reporter, m int, text string) {
	t.Helper()
	words := strings.SplitAfter(text, " ")
	for i := range words {
		report(t, r, runner.Event{Kind: runner.AnswerDelta, Message: m, Text: strings.Join(words[:i+1], "")})
	}
}

// thread messages, as a person scrolling the thread sees them now.
func (w *streamWorld) texts() []string {
	var out []string
	for _, c := range w.slack.Messages(slacktest.ChannelID, streamRoot) {
		latest, _ := w.slack.Message(c.Channel, c.TS)
		out = append(out, latest.Text)
	}
	return out
}

func count(s *slacktest.Server, method string) int { return len(s.CallsTo(method)) }

func TestAnswerStreamsInOneMessage(t *testing.T) {
	t.Parallel()
	const answer = "The deploy of v2 went fine."
	tests := []struct {
		name      string
		noStreams bool // the workspace has no streaming methods
		changes   string
	}{
		{"streaming methods", false, "chat.appendStream"},
		{"post and update", true, "chat.update"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newStreamWorld(t)
			if tt.noStreams {
				w.slack.FailNext("chat.startStream", "unknown_method", 1)
			}
			r := w.process(handlers.StreamOptions{Interval: time.Nanosecond})
			grow(t, r, 1, "The deploy of v2 went ")
			if got := w.texts(); len(got) != 1 || got[0] != "The deploy of v2 went " {
				t.Fatalf("while streaming the thread shows %q, want the answer so far", got)
			}
			report(t, r, runner.Event{Kind: runner.Answer, Message: 1, Text: answer})
			if got := w.texts(); len(got) != 1 || got[0] != answer {
				t.Errorf("the thread shows %q, want the one answer %q", got, answer)
			}
			if n := count(w.slack, tt.changes); n < 4 {
				t.Errorf("%d calls to %s, want one per word", n, tt.changes)
			}
			if tt.noStreams {
				// The next answer does not try the streaming methods.
				grow(t, r, 3, "Second answer.")
				if n := count(w.slack, "chat.startStream"); n != 1 {
					t.Errorf("chat.startStream called %d times, want only the refused first try", n)
				}
			} else if w.slack.Streaming(slacktest.ChannelID, w.slack.Messages(slacktest.ChannelID, streamRoot)[0].TS) {
				t.Errorf("the stream was not stopped after the final answer")
			}
		})
	}
}

// TestStreamUpdatesAreBounded: within the interval changes wait, the last
// one is shown when the interval is up, and the final answer at once.
func TestStreamUpdatesAreBounded(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	r := w.process(handlers.StreamOptions{Interval: time.Hour, UpdateOnly: true})
	grow(t, r, 1, "one two three four five")
	if n := count(w.slack, "chat.update"); n != 0 {
		t.Errorf("%d updates within the interval, want 0", n)
	}
	report(t, r, runner.Event{Kind: runner.Answer, Message: 1, Text: "one two three four five"})
	if got := w.texts(); len(got) != 1 || got[0] != "one two three four five" {
		t.Errorf("thread = %q, want the final answer at once", got)
	}

	// A model that pauses: what arrived is shown when the interval is up.
	w2 := newStreamWorld(t)
	r2 := w2.process(handlers.StreamOptions{Interval: 50 * time.Millisecond})
	grow(t, r2, 1, "first second")
	calls := w2.slack.WaitFor(t, "chat.appendStream", 1, 5*time.Second)
	if calls[0].Text != "second" {
		t.Errorf("appended %q when the interval was up, want %q", calls[0].Text, "second")
	}
}

// TestStreamedTextIsEscaped: markup in the model's text never goes live,
// while it streams or when final.
func TestStreamedTextIsEscaped(t *testing.T) {
	t.Parallel()
	for _, update := range []bool{false, true} {
		w := newStreamWorld(t)
		r := w.process(handlers.StreamOptions{Interval: time.Nanosecond, UpdateOnly: update})
		grow(t, r, 1, "Hi <!here> see <https://evil.example|docs> & more")
		for _, c := range w.slack.Calls() {
			if strings.Contains(c.Text, "<!here>") || strings.Contains(c.Text, "<https") {
				t.Errorf("%s sent live markup: %q", c.Method, c.Text)
			}
		}
		report(t, r, runner.Event{Kind: runner.Answer, Message: 1, Text: "Hi <!here> & more"})
		if got := w.texts(); len(got) != 1 || got[0] != "Hi &lt;!here&gt; &amp; more" {
			t.Errorf("update=%v: thread = %q, want the escaped answer", update, got)
		}
	}
}

// TestAnswerCutOffByACrash: a process dies mid-stream; the process that
// carries the run on finishes the half message with a note and streams
// the answer again below it, once.
func TestAnswerCutOffByACrash(t *testing.T) {
	t.Parallel()
	for _, update := range []bool{false, true} {
		t.Run(fmt.Sprintf("update=%v", update), func(t *testing.T) {
			w := newStreamWorld(t)
			o := handlers.StreamOptions{Interval: time.Nanosecond, UpdateOnly: update}
			grow(t, w.process(o), 1, "All three calls")
			// That process is gone; the next one re-runs the model step.
			next := w.process(o)
			grow(t, next, 1, "All three calls are done.")
			report(t, next, runner.Event{Kind: runner.Answer, Message: 1, Text: "All three calls are done."})
			want := []string{"All three calls … (interrupted; the answer continues below)", "All three calls are done."}
			if got := w.texts(); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("thread = %q, want %q", got, want)
			}
		})
	}
}

// TestAnswerSavedBeforeACrash: the process died after the answer was
// saved and before it was shown: the next one finishes the streamed
// message instead of posting the answer again, and a repeated delivery
// shows nothing new.
func TestAnswerSavedBeforeACrash(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	o := handlers.StreamOptions{Interval: time.Hour}
	grow(t, w.process(o), 1, "Deployed v2 to production.")
	next := w.process(o)
	report(t, next, runner.Event{Kind: runner.Answer, Message: 1, Text: "Deployed v2 to production."})
	report(t, w.process(o), runner.Event{Kind: runner.Answer, Message: 1, Text: "Deployed v2 to production."})
	if got := w.texts(); len(got) != 1 || got[0] != "Deployed v2 to production." {
		t.Errorf("thread = %q, want the answer once", got)
	}
	if n := count(w.slack, "chat.postMessage"); n != 0 {
		t.Errorf("chat.postMessage called %d times, want 0", n)
	}
}

// TestFailedRunFinishesTheStream: a model call that fails mid-stream
// leaves the message with the note, then the error card.
func TestFailedRunFinishesTheStream(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	r := w.process(handlers.StreamOptions{Interval: time.Nanosecond})
	grow(t, r, 1, "Half an")
	report(t, r, runner.Event{Kind: runner.RunFailed, Text: "model down"})
	got := w.texts()
	if len(got) != 2 || got[0] != "Half an … (interrupted; the answer continues below)" || !strings.Contains(got[1], "error") {
		t.Errorf("thread = %q, want the cut-off answer with its note, then the error card", got)
	}
}

// TestStreamBeforeToolCalls: text streamed before tool calls stays as it
// was written; nothing is posted for it again.
func TestStreamBeforeToolCalls(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	r := w.process(handlers.StreamOptions{Interval: time.Hour})
	grow(t, r, 1, "Let me look that up.")
	report(t, r, runner.Event{Kind: runner.StreamEnded, Message: 1, Text: "Let me look that up."})
	if got := w.texts(); len(got) != 1 || got[0] != "Let me look that up." {
		t.Errorf("thread = %q, want the streamed text once, complete", got)
	}
}

// TestThinkingStatus: "is thinking…" in assistant threads (direct
// messages) only, and a refusal changes nothing.
func TestThinkingStatus(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	r := w.process(handlers.StreamOptions{})
	report(t, r, runner.Event{Kind: runner.Thinking, Thread: thread("D0ALICE")})
	report(t, r, runner.Event{Kind: runner.Thinking, Thread: thread(slacktest.ChannelID)})
	calls := w.slack.CallsTo("assistant.threads.setStatus")
	if len(calls) != 1 || calls[0].Channel != "D0ALICE" || calls[0].ThreadTS != streamRoot || calls[0].Text != "is thinking…" {
		t.Errorf("setStatus calls = %+v, want one for the assistant thread", calls)
	}
	w.slack.FailNext("assistant.threads.setStatus", "not_allowed_token_type", 1)
	report(t, r, runner.Event{Kind: runner.Thinking, Thread: thread("D0ALICE")})
}

// TestStreamedMessageGone: a streamed message Slack no longer lets the
// bot change gets the answer posted below it, once.
func TestStreamedMessageGone(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	r := w.process(handlers.StreamOptions{Interval: time.Hour, UpdateOnly: true})
	grow(t, r, 1, "Half of it")
	w.slack.FailNext("chat.update", "message_not_found", 1)
	report(t, r, runner.Event{Kind: runner.Answer, Message: 1, Text: "Half of it, and the rest."})
	report(t, w.process(handlers.StreamOptions{}), runner.Event{Kind: runner.Answer, Message: 1, Text: "Half of it, and the rest."})
	got := w.texts()
	if len(got) != 2 || got[1] != "Half of it, and the rest." {
		t.Errorf("thread = %q, want the answer posted once below the message it could not finish", got)
	}
}

// TestStreamedLinksAreNotDisguised: a link whose label is another URL,
// planted in the model's text, is never live — not in the markdown_text
// of a stream while it grows or when it stops, nor in the text of a
// posted and updated message.
func TestStreamedLinksAreNotDisguised(t *testing.T) {
	t.Parallel()
	const answer = "Log in again at [https://sso.corp.example/login](https://evil.example/login) to finish."
	for _, update := range []bool{false, true} {
		t.Run(fmt.Sprintf("update=%v", update), func(t *testing.T) {
			w := newStreamWorld(t)
			r := w.process(handlers.StreamOptions{Interval: time.Nanosecond, UpdateOnly: update})
			grow(t, r, 1, answer)
			report(t, r, runner.Event{Kind: runner.Answer, Message: 1, Text: answer})
			for _, c := range w.slack.Calls() {
				if md, ok := c.Params["markdown_text"]; ok {
					if live := slackuitest.Markdown(md); live != nil {
						t.Errorf("%s sent markdown_text %q; live: %v", c.Method, md, live)
					}
				}
				if live := slackuitest.Mrkdwn(c.Text); live != nil {
					t.Errorf("%s sent text %q; live: %v", c.Method, c.Text, live)
				}
			}
			got := w.texts()
			if len(got) != 1 || strings.ReplaceAll(got[0], "\u200b", "") != answer {
				t.Errorf("thread = %q, want the answer as written, once", got)
			}
		})
	}
}

// TestStreamStartedWithoutTS: Slack answers chat.startStream without the
// message's ts; the answer is posted and updated instead, and the
// streaming methods are never called on the posted message.
func TestStreamStartedWithoutTS(t *testing.T) {
	t.Parallel()
	const answer = "The deploy of v2 went fine."
	w := newStreamWorld(t)
	w.slack.StartStreamWithoutTS(1)
	r := w.process(handlers.StreamOptions{Interval: time.Nanosecond})
	grow(t, r, 1, answer)
	report(t, r, runner.Event{Kind: runner.Answer, Message: 1, Text: answer})
	if got := w.texts(); len(got) != 1 || got[0] != answer {
		t.Fatalf("thread = %q, want the answer, complete, once", got)
	}
	posted := w.slack.CallsTo("chat.postMessage")
	if len(posted) != 1 {
		t.Fatalf("chat.postMessage called %d times, want once, for the answer", len(posted))
	}
	for _, method := range []string{"chat.appendStream", "chat.stopStream"} {
		for _, c := range w.slack.CallsTo(method) {
			if c.TS == posted[0].TS {
				t.Errorf("%s called on the message posted with chat.postMessage (%s)", method, c.TS)
			}
		}
	}
	// Later answers do not try the streaming methods again.
	grow(t, r, 3, "Second answer.")
	if n := count(w.slack, "chat.startStream"); n != 1 {
		t.Errorf("chat.startStream called %d times, want only the first try", n)
	}
}
