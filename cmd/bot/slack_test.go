package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	for _, text := range []string{"help", ""} {
		var answer struct {
			ResponseType string `json:"response_type"`
			Text         string `json:"text"`
		}
		body := readAll(t, h.command(text, nil, nil))
		if err := json.Unmarshal([]byte(body), &answer); err != nil {
			t.Fatalf("/agent %q answered %s: %v", text, body, err)
		}
		if answer.ResponseType != "ephemeral" || !strings.Contains(answer.Text, "/agent &lt;request&gt;") {
			t.Errorf("/agent %q answered %+v; want the usage, only to the asker, in mrkdwn", text, answer)
		}
	}
	if n := len(h.slack.CallsTo("chat.postMessage")); n != 0 {
		t.Errorf("help posted %d messages", n)
	}
}

func TestMentionStartsARunInItsThread(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Hi Alice."))
	ts := "1800000000.000100"
	h.event("", map[string]any{"type": "app_mention", "channel": slacktest.ChannelID, "user": requester,
		"text": "<@" + slacktest.BotUserID + "> say hi", "ts": ts})
	h.reply(slacktest.Call{Channel: slacktest.ChannelID, TS: ts}, "Hi Alice.")
	first := h.model.Requests()[0]
	if got := first.Messages[len(first.Messages)-1].Text(); got != "say hi" {
		t.Errorf("the model was asked %q, want the mention's text without the mention", got)
	}
}

// The system prompt names the requester, the channel and the tools, in
// plain words: the conversation holds no Slack markup.
func TestSystemPrompt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("ok"))
	h.command("hello", nil, nil)
	h.reply(h.root(1), "ok")
	req := h.model.Requests()[0]
	system := req.Messages[0]
	for _, want := range []string{"user " + requester, "channel " + slacktest.ChannelID, "http_request"} {
		if system.Role != "system" || !strings.Contains(system.Text(), want) {
			t.Errorf("system prompt does not contain %q: %s", want, system.Text())
		}
	}
	if strings.ContainsAny(system.Text(), "<>") {
		t.Errorf("system prompt holds Slack markup: %s", system.Text())
	}
	if len(req.Tools) != 1 || req.Tools[0].Function.Name != "http_request" {
		t.Errorf("tools offered = %+v, want http_request", req.Tools)
	}
}

// Slack answering 429 delays a message; it does not lose it.
func TestRateLimitedPostsAreRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	h.slack.RateLimitNext("chat.postMessage", 2, time.Second)
	h.slack.RateLimitNext("chat.update", 1, time.Second)
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	h.eventually(func() bool { return strings.Contains(h.card(card), "Approved by") }, "the card to show the approval")
}

// SIGTERM during a tool call: the bot stops taking requests, lets the
// call finish and save, and exits; the next process finishes the run.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/slow", "v2")),
		llmtest.Reply("Deployed."),
	)
	h.target.Delay("/slow", 2*time.Second)
	h.command("deploy", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.click(card, "approve", approver)
	h.eventually(func() bool { return h.target.Count("POST /slow") == 1 }, "the call to start")
	if err := h.bot.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New requests are refused while it drains.
	h.eventually(func() bool {
		resp, err := botClient.Get("http://" + h.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	}, "the bot to stop answering during shutdown")
	if err := h.bot.Wait(); err != nil {
		t.Errorf("bot exited with %v, want a clean exit", err)
	}
	h.bot = nil
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /slow"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
	if !strings.Contains(h.logs.String(), "shutting down") {
		t.Error("no shutdown line in the logs")
	}
}

// Slack escapes &, < and > and wraps links; the model gets what was typed.
func TestTheModelGetsTheTextAsTyped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("ok"), llmtest.Reply("ok again"))
	h.command("fetch <https://example.com/a?x=1&amp;y=2> if 1 &lt; 2", nil, nil)
	root := h.root(1)
	if root.Text != "<@"+requester+"> asked: fetch <https://example.com/a?x=1&amp;y=2> if 1 &lt; 2" {
		t.Errorf("root message = %q; want the request as Slack sent it (mrkdwn)", root.Text)
	}
	h.reply(root, "ok")
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": requester,
		"text": "and <https://example.org|example.org> &amp; more", "ts": "1800000000.000009", "thread_ts": root.TS})
	h.reply(root, "ok again")
	var asked []string
	for _, r := range h.model.Requests() {
		asked = append(asked, r.Messages[len(r.Messages)-1].Text())
	}
	want := []string{"fetch https://example.com/a?x=1&y=2 if 1 < 2", "and https://example.org & more"}
	if strings.Join(asked, "|") != strings.Join(want, "|") {
		t.Errorf("the model was asked %q, want %q", asked, want)
	}
}
