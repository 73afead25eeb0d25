package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/countersign/countersign/internal/imagetest"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// threadReply is a person's message in root's thread, with extra fields
// (a subtype, files).
func threadReply(root slacktest.Call, user, text, ts string, extra map[string]any) map[string]any {
	ev := map[string]any{"type": "message", "channel": root.Channel, "user": user, "text": text, "ts": ts, "thread_ts": root.TS}
	for k, v := range extra {
		ev[k] = v
	}
	return ev
}

// startConversation has the requester start a conversation the model
// answers with "Hi."; it returns its root message.
func startConversation(h *harness) slacktest.Call {
	h.t.Helper()
	h.command("hello", nil, nil)
	root := h.root(1)
	h.reply(root, "Hi.")
	return root
}

// countReplies is how many messages in root's thread hold text.
func countReplies(h *harness, root slacktest.Call, text string) int {
	n := 0
	for _, m := range h.slack.Messages(root.Channel, root.TS) {
		if strings.Contains(m.Text, text) {
			n++
		}
	}
	return n
}

// A reply also sent to the channel ("Also send to #channel": subtype
// thread_broadcast) continues the conversation like any reply: the
// model reads it, and its answer is posted once.
func TestBroadcastReplyContinuesTheConversation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", llmtest.Reply("Hi."), llmtest.Reply("The logs are clean."))
	root := startConversation(h)
	h.event("", threadReply(root, requester, "and the logs?", "1900000000.000100", map[string]any{"subtype": "thread_broadcast"}))
	h.reply(root, "The logs are clean.")
	reqs := h.model.Requests()
	last := reqs[len(reqs)-1].Messages
	if got := last[len(last)-1].Text(); got != "and the logs?" {
		t.Errorf("the model read %q, want the broadcast reply's text", got)
	}
	if n := countReplies(h, root, "The logs are clean."); n != 1 {
		t.Errorf("the answer was posted %d times, want once", n)
	}
	// An edit of that reply is not a request.
	h.event("", threadReply(root, requester, "and the logs??", "1900000000.000200", map[string]any{"subtype": "message_changed"}))
	h.model.Then(llmtest.Reply("Again."))
	h.command("again", nil, nil) // something to wait for after the edit
	h.eventually(func() bool { return len(h.model.Requests()) == 3 }, "the second command's model call")
	if n := len(h.model.Requests()); n != 3 {
		t.Errorf("%d model calls, want 3: the edit asked the model", n)
	}
}

// A screenshot attached to a reply (subtype file_share) reaches the model
// in that user message, in its provider's wire shape, downloaded once
// with the bot token from the fake Slack's file host (its thumbnail); a
// later turn sends it again from the checkpoint without downloading it
// again.
func TestAttachedScreenshotReachesTheModel(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			// The file itself is over the bound; its thumbnail is not.
			thumb := imagetest.PNG(8, 0)
			shot := append(imagetest.PNG(8, 0), make([]byte, 2<<20)...)
			script := []llm.Message{llmtest.Reply("Hi."), llmtest.Reply("The API timed out."), llmtest.Reply("Yes, the same one.")}
			h := newIdleHarness(t, "")
			h.slack.RequireToken(botToken)
			var anthropic *llmtest.AnthropicServer
			if provider == "anthropic" {
				anthropic = h.useAnthropic(script...)
			} else {
				h.model.Then(script...)
			}
			h.start()
			root := startConversation(h)
			file := h.slack.AddFile(slacktest.File{Name: "shot.png", Mimetype: "image/png",
				Data: shot, Thumbs: map[int][]byte{1024: thumb}})
			h.event("", threadReply(root, requester, "why does this fail?", "1900000000.000100",
				map[string]any{"subtype": "file_share", "files": []any{file}}))
			h.reply(root, "The API timed out.")
			h.event("", threadReply(root, requester, "is it the same error as before?", "1900000000.000200", nil))
			h.reply(root, "Yes, the same one.")

			wantLine := fmt.Sprintf(`[image "shot.png", image/png, %d bytes]`, len(thumb))
			for turn := 1; turn <= 2; turn++ {
				var text string
				var images []llm.Image
				if anthropic != nil {
					req := anthropic.Requests()[turn]
					if req.Problem != "" {
						t.Fatalf("Anthropic refused the request: %s", req.Problem)
					}
					m := req.Messages[2] // user, assistant, this user turn
					text, images = m.Text(), m.Images()
				} else {
					req := h.model.Requests()[turn]
					if req.Problem != "" {
						t.Fatalf("OpenAI refused the request: %s", req.Problem)
					}
					m := req.Messages[3] // system, user, assistant, this user message
					text, images = m.Text(), m.Images()
				}
				if text != "why does this fail?\n"+wantLine {
					t.Errorf("turn %d: the model read %q, want the text and the line %q", turn, text, wantLine)
				}
				if len(images) != 1 || images[0].MIME != "image/png" || !bytes.Equal(images[0].Data, thumb) {
					t.Errorf("turn %d: the user message holds %d images; want the thumbnail, byte for byte", turn, len(images))
				}
			}
			fetches := h.slack.FileFetches()
			if len(fetches) != 1 || !fetches[0].Token || !fetches[0].Served || !strings.Contains(fetches[0].Path, "/files-tmb/") {
				t.Errorf("file host requests %+v; want one, for the thumbnail, with the token", fetches)
			}
			// The checkpoint in Redis keeps it, with the message.
			thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
			if out := h.cli(t, "", "checkpoints", "show", "--thread", thread, "--json"); !strings.Contains(out, base64.StdEncoding.EncodeToString(thumb)) {
				t.Errorf("the checkpoint does not keep the attached image")
			}
			// The image is the model's: never in the thread, nor the log.
			b64 := base64.StdEncoding.EncodeToString(thumb)[:24]
			for _, m := range h.slack.Messages(root.Channel, root.TS) {
				if strings.Contains(m.Text+string(m.Blocks), b64) {
					t.Errorf("a message in the thread holds the image's bytes")
				}
			}
			if logs := h.logs.String(); strings.Contains(logs, b64) || strings.Contains(logs, botToken) {
				t.Error("the bot's log holds the image's bytes or the token")
			}
		})
	}
}

// Files the model is not shown become lines saying why, and nothing is
// sent where it should not be: a PDF is not downloaded; a file whose
// url_private an attacker pointed at their own server gets no request
// there, and no token; an HTML page sent as a PNG and an image over the
// bound are refused after their download (with the token, from the file
// host only). An app_mention carries files too.
func TestAttachedFilesTheModelIsNotShown(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	var sawToken atomic.Bool
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Authorization") != "" {
			sawToken.Store(true)
		}
	}))
	t.Cleanup(evil.Close)
	h := newIdleHarness(t, "", llmtest.Reply("Hi."), llmtest.Reply("I read the lines."), llmtest.Reply("A mention."))
	h.slack.RequireToken(botToken)
	h.start()
	root := startConversation(h)
	html := []byte("<!DOCTYPE html><html><body>Sign in</body></html>")
	big := append(imagetest.PNG(8, 0), make([]byte, tools.MaxImageBytes)...)
	files := []any{
		h.slack.AddFile(slacktest.File{Name: "report.pdf", Mimetype: "application/pdf", Data: make([]byte, 34<<10)}),
		h.slack.AddFile(slacktest.File{Name: "elsewhere.png", Mimetype: "image/png", Data: imagetest.PNG(8, 0), URLPrivate: evil.URL + "/files-pri/T0TEST-F9/elsewhere.png"}),
		h.slack.AddFile(slacktest.File{Name: "page.png", Mimetype: "image/png", Data: html, Thumbs: map[int][]byte{720: html}}),
		h.slack.AddFile(slacktest.File{Name: "huge.png", Mimetype: "image/png", Data: big, Thumbs: map[int][]byte{1024: big}}),
	}
	h.event("", threadReply(root, requester, "look at these", "1900000000.000100", map[string]any{"subtype": "file_share", "files": files}))
	h.reply(root, "I read the lines.")
	reqs := h.model.Requests()
	msg := reqs[1].Messages[3]
	want := []string{
		"look at these",
		`[file "report.pdf", application/pdf, 34.0 KiB: not read]`,
		`[image "elsewhere.png", ` + tools.Size(len(imagetest.PNG(8, 0))) + `: not read: its address is not Slack's file host]`,
		`[image "page.png", ` + tools.Size(len(html)) + `: the data is not a PNG image]`,
		`[image "huge.png", ` + tools.Size(len(big)) + `: over the 1 MiB the model is shown]`,
	}
	if got := msg.Text(); got != strings.Join(want, "\n") {
		t.Errorf("the model read:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if n := len(msg.Images()); n != 0 {
		t.Errorf("the model was sent %d images, want none", n)
	}
	if hits.Load() != 0 || sawToken.Load() {
		t.Errorf("the attacker's server got %d requests (token: %v), want none", hits.Load(), sawToken.Load())
	}
	fetches := h.slack.FileFetches()
	if len(fetches) != 2 {
		t.Errorf("file host requests %+v; want two (the page and the huge image), no PDF", fetches)
	}
	for _, f := range fetches {
		if !f.Token || strings.Contains(f.Path, "report.pdf") {
			t.Errorf("file host request %+v; want the token, and no PDF", f)
		}
	}

	// A mention that carries only a file starts a conversation (no help
	// text), its file named.
	ts := "1900000001.000100"
	pdf := h.slack.AddFile(slacktest.File{Name: "plan.pdf", Mimetype: "application/pdf", Data: []byte("%PDF-1.4")})
	h.event("", map[string]any{"type": "app_mention", "channel": slacktest.ChannelID, "user": requester,
		"text": "<@" + slacktest.BotUserID + ">", "ts": ts, "files": []any{pdf}})
	h.reply(slacktest.Call{Channel: slacktest.ChannelID, TS: ts}, "A mention.")
	reqs = h.model.Requests()
	last := reqs[len(reqs)-1].Messages
	if got := last[len(last)-1].Text(); got != `[file "plan.pdf", application/pdf, 8 bytes: not read]` {
		t.Errorf("the mention's model call read %q, want its file's line", got)
	}
}

// With LLM_IMAGES=off an attached image is named, never downloaded, and
// the checkpoint keeps no image.
func TestImagesOffDownloadsNothing(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "", llmtest.Reply("Hi."), llmtest.Reply("I cannot see images."))
	h.env = append(h.env, "LLM_IMAGES=off")
	h.slack.RequireToken(botToken)
	h.start()
	root := startConversation(h)
	// Its first turn saved: "Hi." shows while it streams, before then,
	// and a run cut off mid-stream asks the model again.
	h.waitStatus(root, "done")
	shot := imagetest.PNG(8, 0)
	file := h.slack.AddFile(slacktest.File{Name: "shot.png", Mimetype: "image/png", Data: shot, Thumbs: map[int][]byte{1024: shot}})
	h.event("", threadReply(root, requester, "why?", "1900000000.000100", map[string]any{"subtype": "file_share", "files": []any{file}}))
	h.reply(root, "I cannot see images.")
	msg := h.model.Requests()[1].Messages[3]
	want := "why?\n" + `[image "shot.png", ` + tools.Size(len(shot)) + `: not read: the model is shown no images]`
	if got := msg.Text(); got != want || len(msg.Images()) != 0 {
		t.Errorf("the model read %q with %d images, want %q and none", got, len(msg.Images()), want)
	}
	if n := len(h.slack.FileFetches()); n != 0 {
		t.Errorf("file host got %d requests, want none", n)
	}
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	out := h.cli(t, "", "checkpoints", "show", "--thread", thread, "--json")
	if strings.Contains(out, `"images"`) || strings.Contains(out, base64.StdEncoding.EncodeToString(shot)[:24]) {
		t.Errorf("the checkpoint keeps an image:\n%s", out)
	}
}

// The replica that took a reply with a screenshot is killed while it
// downloads the image, before it hands the reply on to the conversation.
// The reply was acknowledged, so it is not lost: once the dead attempt's
// hold on it lapses, the bot (restarted here) downloads the image again
// and hands the reply on once. The model reads it once, with its image,
// and its answer is posted once.
func TestKilledWhileDownloadingAFile(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "")
	h.slack.RequireToken(botToken)
	h.model.Then(llmtest.Reply("Hi."), llmtest.Reply("The API timed out."))
	h.start()
	root := startConversation(h)
	shot := imagetest.PNG(8, 0)
	file := h.slack.AddFile(slacktest.File{Name: "shot.png", Mimetype: "image/png", Data: shot})
	arrived, release := h.slack.HoldNextFile()
	defer release()
	h.event("", threadReply(root, requester, "why does this fail?", "1900000000.000100",
		map[string]any{"subtype": "file_share", "files": []any{file}}))
	h.eventually(func() bool {
		select {
		case <-arrived:
			return true
		default:
			return false
		}
	}, "the image's download")
	h.kill() // the held download ends with its connection, unanswered
	h.start()
	h.reply(root, "The API timed out.")

	if n := countReplies(h, root, "The API timed out."); n != 1 {
		t.Errorf("the answer was posted %d times, want 1", n)
	}
	reqs := h.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model was asked %d times, want 2", len(reqs))
	}
	asked, images := 0, 0
	for _, m := range reqs[1].Messages {
		if strings.HasPrefix(m.Text(), "why does this fail?") {
			asked++
			images += len(m.Images())
		}
	}
	if asked != 1 || images != 1 {
		t.Errorf("the model read the reply %d times with %d images, want once with its image", asked, images)
	}
	if fetches := h.slack.FileFetches(); len(fetches) != 1 || !fetches[0].Served {
		t.Errorf("file host requests answered %+v; want the second attempt's download", fetches)
	}
}
