package slacksim_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/internal/testtarget"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackdir"
	"github.com/countersign/countersign/slacksim"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// These tests put the simulator in front of the real bot — handlers,
// runner, agent, the demo model, http_request and Redis — wired as the
// bot's playground command wires them, and act as the page does: through
// /ui/* and /events.

const (
	you      = "U0YOU"
	teammate = "U0TEAMMATE"
)

// world is the simulator, the bot and a target for http_request, all on
// one test server.
type world struct {
	t      *testing.T
	url    string
	sim    *slacksim.Simulator
	target *target
	logs   *bytes.Buffer
	logMu  *sync.Mutex
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldOf(t, false)
}

// newWorldOf is newWorld, with the Home tab and its inbox if home is set
// (in a Redis prefix of the test's own: the inbox spans threads).
func newWorldOf(t *testing.T, home bool) *world {
	t.Helper()
	secret, token := randomHex(16), "xoxb-"+randomHex(8)
	var opts redisstore.Options
	if home {
		opts.Prefix = "home-" + randomHex(6)
	}
	store := redisstore.New(redistest.Client(t), opts)
	policy := tools.DefaultPolicy()
	reg, err := tools.NewRegistry(policy, tools.Builtins(policy, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, target: newTarget(t), logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	log := logrus.New()
	log.Out = lockedWriter{w.logMu, w.logs}
	log.Level = logrus.DebugLevel

	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	// A team of its own keeps this test's threads apart from other tests
	// that share the Redis.
	w.sim = slacksim.New(slacksim.Options{
		BotURL: srv.URL, SigningSecret: secret, BotToken: token,
		TeamID: "T" + strings.ToUpper(randomHex(5)), Model: "demo (offline)", Logger: log,
		// More patient than Slack's 3 seconds: the race detector and
		// the other packages' tests slow everything down.
		Client: &http.Client{Timeout: 20 * time.Second},
	})
	api := slack.New(token, slack.OptionAPIURL(srv.URL+"/api/"))
	var svc *runner.Service
	a, err := agent.New(llm.NewDemo(), reg, store, agent.Options{
		Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	// A decision that arrives while the run that posted the card still
	// holds the thread's lease is picked up by the schedule once the lease
	// runs out; a short lease keeps that quick.
	rep := handlers.NewReporter(api, store, nil, log)
	ropts := runner.Options{Logger: log, Schedule: true, Audit: true, LeaseTTL: time.Second}
	hopts := handlers.Options{BotUserID: slacksim.DefaultBotUserID, Logger: log}
	if home {
		lookups := slackdir.NewGroups(api, 0, nil)
		ropts.Inbox, ropts.Groups, ropts.Members = true, lookups, lookups
		hopts.Home = store
	}
	svc = runner.New(a, store, rep, ropts)
	schedCtx, stopSchedule := context.WithCancel(context.Background())
	go svc.RunSchedule(schedCtx, 100*time.Millisecond)
	bot := handlers.New(api, svc, store, secret, hopts)
	rep.WithHome(bot.Home())
	mux.Handle("/api/", w.sim.APIHandler())
	mux.Handle("/slack/", bot.Handler())
	mux.Handle("/", w.sim.PageHandler())
	t.Cleanup(func() {
		stopSchedule()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = bot.Shutdown(ctx)
		if t.Failed() {
			w.logMu.Lock()
			t.Logf("bot logs:\n%s", w.logs.String())
			w.logMu.Unlock()
		}
	})
	return w
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// ui posts to the page's endpoints as the page does, and returns the
// status and the answer's error.
func (w *world) ui(path string, body map[string]any) (int, string) {
	w.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, w.url+path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(slacksim.TokenHeader, w.sim.PageToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var answer struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		w.t.Fatalf("POST %s: %v", path, err)
	}
	return resp.StatusCode, answer.Error
}

// mustUI is ui that fails the test unless the answer is ok.
func (w *world) mustUI(path string, body map[string]any) {
	w.t.Helper()
	if status, msg := w.ui(path, body); status != http.StatusOK {
		w.t.Fatalf("POST %s %v = %d %s", path, body, status, msg)
	}
}

// eventually waits for cond to find a message, and returns it.
func (w *world) eventually(what string, find func(st slacksim.State) (slacksim.Message, bool)) slacksim.Message {
	w.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if m, ok := find(w.sim.State()); ok {
			return m
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Fatalf("timed out waiting for %s; messages:\n%s", what, dump(w.sim.State()))
	return slacksim.Message{}
}

// message waits for a message in thread (root ts, or "" for the channel)
// whose text or blocks contain want.
func (w *world) message(thread, want string) slacksim.Message {
	w.t.Helper()
	return w.eventually(fmt.Sprintf("%q in thread %q", want, thread), func(st slacksim.State) (slacksim.Message, bool) {
		for _, m := range st.Messages {
			if m.ThreadTS == thread && strings.Contains(content(m), want) {
				return m, true
			}
		}
		return slacksim.Message{}, false
	})
}

// current returns a message's latest content.
func (w *world) current(ts string) slacksim.Message {
	for _, m := range w.sim.State().Messages {
		if m.TS == ts {
			return m
		}
	}
	w.t.Fatalf("no message %s", ts)
	return slacksim.Message{}
}

// request sends "/agent fetch <target><path>" as you, and returns the root
// message and the approval card.
func (w *world) request(path string) (root, card slacksim.Message) {
	w.t.Helper()
	w.mustUI("/ui/send", map[string]any{"user": you, "text": "/agent fetch " + w.target.URL + path})
	root = w.message("", "<@"+you+"> asked: fetch "+w.target.URL+path)
	card = w.message(root.TS, `"action_id":"approve"`)
	return root, card
}

// content is a message's text and its blocks' JSON, with <, > and & as
// they are.
func content(m slacksim.Message) string {
	var blocks any
	_ = json.Unmarshal(m.Blocks, &blocks)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(blocks)
	return m.Text + " " + b.String()
}

func dump(st slacksim.State) string {
	var b strings.Builder
	for _, m := range st.Messages {
		fmt.Fprintf(&b, "  %s thread=%q user=%s to=%q text=%q blocks=%d bytes\n", m.TS, m.ThreadTS, m.User, m.VisibleTo, m.Text, len(m.Blocks))
	}
	return b.String()
}

func TestApproveThroughTheBot(t *testing.T) {
	w := newWorld(t)
	stream := w.events()
	root, card := w.request("/approve")
	if w.target.Count("/approve") != 0 {
		t.Fatal("the call ran before anyone approved it")
	}
	w.mustUI("/ui/click", map[string]any{"user": teammate, "ts": card.TS, "action_id": "approve"})
	w.message(root.TS, "Done: the request to "+w.target.URL+"/approve returned HTTP 200 OK")
	if n := w.target.Count("/approve"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
	settled := content(w.current(card.TS))
	if !strings.Contains(settled, "Approved by <@"+teammate+">") || strings.Contains(settled, `"action_id"`) {
		t.Errorf("card after approval = %s; want 'Approved by <@%s>' and no buttons", settled, teammate)
	}
	// The buttons are gone, so the page cannot click them again.
	if status, _ := w.ui("/ui/click", map[string]any{"user": you, "ts": card.TS, "action_id": "approve"}); status != http.StatusNotFound {
		t.Errorf("clicking a settled card answered %d, want %d", status, http.StatusNotFound)
	}

	// The page heard all of it: a snapshot, then the messages and the
	// card's update.
	first := stream.next(t)
	if first.name != "snapshot" {
		t.Fatalf("first event %q, want snapshot", first.name)
	}
	sawCard, sawUpdate := false, false
	for !sawUpdate {
		ev := stream.next(t)
		var m slacksim.Message
		if ev.name != "message" || json.Unmarshal([]byte(ev.data), &m) != nil || m.TS != card.TS {
			continue
		}
		sawCard = sawCard || strings.Contains(content(m), `"action_id":"approve"`)
		sawUpdate = sawCard && strings.Contains(content(m), "Approved by")
	}
}

func TestEditModalShowsErrorsThenApproves(t *testing.T) {
	w := newWorld(t)
	root, card := w.request("/original")
	w.mustUI("/ui/click", map[string]any{"user": you, "ts": card.TS, "action_id": "edit"})
	view := w.view(you, func(v slacksim.View) bool { return true })
	if !bytes.Contains(view.View, []byte(`"callback_id":"edit_call"`)) {
		t.Fatalf("the modal opened is not the edit modal: %s", view.View)
	}
	if views := w.sim.State().Views[teammate]; len(views) != 0 {
		t.Errorf("the teammate sees %d modals; the modal is for the one who clicked", len(views))
	}

	submit := func(args string) {
		w.mustUI("/ui/submit", map[string]any{"user": you, "view_id": view.ID,
			"values": map[string]any{slackui.BlockArgs: map[string]string{slackui.InputArgs: args}}})
	}
	submit(`{"method": "GET", "url": `)
	shown := w.view(you, func(v slacksim.View) bool { return v.Errors[slackui.BlockArgs] != "" })
	if !strings.Contains(shown.Errors[slackui.BlockArgs], "not valid JSON") || shown.Hash == view.Hash {
		t.Errorf("after invalid JSON the modal shows %q with hash %s (was %s); want the JSON error and a new hash",
			shown.Errors[slackui.BlockArgs], shown.Hash, view.Hash)
	}
	submit(fmt.Sprintf(`{"method": "GET", "url": %q}`, w.target.URL+"/edited"))
	w.eventually("the modal to close", func(st slacksim.State) (slacksim.Message, bool) {
		return slacksim.Message{}, len(st.Views[you]) == 0
	})
	w.message(root.TS, "ok GET /edited")
	if n, m := w.target.Count("/edited"), w.target.Count("/original"); n != 1 || m != 0 {
		t.Errorf("/edited ran %d times and /original %d times, want 1 and 0", n, m)
	}
}

func TestReplyInThreadRejectsWithFeedback(t *testing.T) {
	w := newWorld(t)
	root, _ := w.request("/feedback")
	w.mustUI("/ui/send", map[string]any{"user": teammate, "text": "not this one & not now", "thread_ts": root.TS})
	// The card soon quotes the reply too: look for the teammate's message.
	reply := w.eventually("the teammate's reply", func(st slacksim.State) (slacksim.Message, bool) {
		for _, m := range st.Messages {
			if m.ThreadTS == root.TS && m.User == teammate {
				return m, true
			}
		}
		return slacksim.Message{}, false
	})
	if reply.User != teammate || reply.Text != "not this one &amp; not now" {
		t.Errorf("the reply is shown as %s: %q; want the teammate's, escaped as Slack does", reply.User, reply.Text)
	}
	// The model's answer quotes the result, which names the teammate in
	// plain words: no markup reaches the model, so none shows, live or
	// escaped.
	w.message(root.TS, "was not run. Rejected by user "+teammate+": not this one &amp; not now")
	if n := w.target.Count("/feedback"); n != 0 {
		t.Errorf("the call ran %d times after it was rejected", n)
	}
}

func TestMentionStartsAConversation(t *testing.T) {
	w := newWorld(t)
	w.mustUI("/ui/send", map[string]any{"user": you, "text": "@Countersign fetch " + w.target.URL + "/mention"})
	asked := w.message("", "<@"+slacksim.DefaultBotUserID+"> fetch <"+w.target.URL+"/mention>")
	if asked.User != you {
		t.Errorf("the mention is shown as %s's, want yours", asked.User)
	}
	card := w.message(asked.TS, `"action_id":"approve"`)
	w.mustUI("/ui/click", map[string]any{"user": you, "ts": card.TS, "action_id": "approve"})
	w.message(asked.TS, "returned HTTP 200 OK")
}

func TestSlashCommandAnswers(t *testing.T) {
	w := newWorld(t)
	w.mustUI("/ui/send", map[string]any{"user": you, "text": "/agent help"})
	help := w.message("", "runs an AI agent for you")
	if help.VisibleTo != you || help.User != slacksim.DefaultBotUserID {
		t.Errorf("the help is from %s to %q, want from the bot to you only", help.User, help.VisibleTo)
	}
	w.mustUI("/ui/send", map[string]any{"user": teammate, "text": "/deploy now"})
	refused := w.message("", "/deploy is not a valid command")
	if refused.VisibleTo != teammate || refused.User != slacksim.SlackbotID {
		t.Errorf("the refusal is from %s to %q, want from Slackbot to the teammate only", refused.User, refused.VisibleTo)
	}

	tests := []struct {
		name   string
		status int
		want   string
	}{
		{"user", http.StatusBadRequest, "no such person"},
		{"empty", http.StatusBadRequest, "nothing to send"},
		{"thread", http.StatusNotFound, "no such message"},
	}
	for _, tt := range tests {
		body := map[string]any{"user": you, "text": "hello"}
		switch tt.name {
		case "user":
			body["user"] = "U0NOBODY"
		case "empty":
			body["text"] = "  "
		case "thread":
			body["thread_ts"] = "1.000001"
		}
		if status, msg := w.ui("/ui/send", body); status != tt.status || !strings.Contains(msg, tt.want) {
			t.Errorf("send with a bad %s = %d %q, want %d %q", tt.name, status, msg, tt.status, tt.want)
		}
	}
}

func TestBotFailuresAreShownAsSlackShowsThem(t *testing.T) {
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer broken.Close()
	sim := slacksim.New(slacksim.Options{BotURL: broken.URL, SigningSecret: "s"})
	ctx := context.Background()
	if err := sim.Send(ctx, you, "/agent fetch https://example.com", ""); err != nil {
		t.Fatalf("Send: %v", err)
	}
	msgs := sim.State().Messages
	if len(msgs) != 1 || msgs[0].Text != `/agent failed with the error "dispatch_failed"` || msgs[0].VisibleTo != you {
		t.Errorf("after a failed command the channel has %+v; want Slackbot's dispatch_failed, to you", msgs)
	}
	if err := sim.Send(ctx, you, "hello", ""); err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Errorf("Send of a message to a failing bot = %v, want an HTTP 500 error", err)
	}
}

func TestPageAndItsGuards(t *testing.T) {
	w := newWorld(t)
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(w.sim.PageURL(w.url))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(page, []byte(`id="composer-input"`)) ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("GET / = %d, CSP %q, %d bytes; want the page with a strict CSP", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), len(page))
	}
	for _, path := range []string{"/static/app.js", "/static/style.css"} {
		resp, err := http.Get(w.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d", path, resp.StatusCode)
		}
	}

	send := func(contentType, origin string) int {
		req, _ := http.NewRequest(http.MethodPost, w.url+"/ui/send", strings.NewReader(`{"user":"U0YOU","text":"hi"}`))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set(slacksim.TokenHeader, w.sim.PageToken())
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tests := []struct {
		contentType, origin string
		want                int
	}{
		{"text/plain", "", http.StatusUnsupportedMediaType},
		{"application/json", "http://elsewhere.example", http.StatusForbidden},
		{"application/json", w.url, http.StatusOK},
	}
	for _, tt := range tests {
		if got := send(tt.contentType, tt.origin); got != tt.want {
			t.Errorf("POST /ui/send as %s from %q = %d, want %d", tt.contentType, tt.origin, got, tt.want)
		}
	}
}

func TestEventsStreamEndsOnClose(t *testing.T) {
	sim := slacksim.New(slacksim.Options{BotURL: "http://127.0.0.1:1", SigningSecret: "s", BotToken: "xoxb-t"})
	mux := http.NewServeMux()
	mux.Handle("/api/", sim.APIHandler())
	mux.Handle("/", sim.PageHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	w := &world{t: t, url: srv.URL, sim: sim}
	stream := w.events()
	if ev := stream.next(t); ev.name != "snapshot" {
		t.Fatalf("first event %q, want snapshot", ev.name)
	}
	api := slack.New("xoxb-t", slack.OptionAPIURL(srv.URL+"/api/"))
	if _, _, err := api.PostMessage(slacksim.DefaultChannelID, slack.MsgOptionText("hello *there*", false)); err != nil {
		t.Fatal(err)
	}
	ev := stream.next(t)
	var m slacksim.Message
	if err := json.Unmarshal([]byte(ev.data), &m); ev.name != "message" || err != nil || m.Text != "hello *there*" {
		t.Errorf("event %q %s, want the message", ev.name, ev.data)
	}
	sim.Close()
	if ev, ok := stream.wait(5 * time.Second); ok {
		t.Errorf("after Close the stream sent %q %s, want its end", ev.name, ev.data)
	}
}

// stream is the page's event stream.
type stream struct {
	events chan sse
}

type sse struct{ name, data string }

// events connects to /events as the page does.
func (w *world) events() *stream {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.url+"/events?token="+w.sim.PageToken(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		w.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		w.t.Errorf("/events Content-Type %q", ct)
	}
	s := &stream{events: make(chan sse, 1000)}
	go func() {
		defer close(s.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		var ev sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				s.events <- ev
				ev = sse{}
			}
		}
	}()
	w.t.Cleanup(cancel)
	return s
}

func (s *stream) wait(d time.Duration) (sse, bool) {
	select {
	case ev, ok := <-s.events:
		return ev, ok
	case <-time.After(d):
		return sse{name: "(nothing before the timeout)"}, true
	}
}

func (s *stream) next(t *testing.T) sse {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatal("the event stream ended")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no event for 15 s")
		return sse{}
	}
}

// view waits for a modal of user's that matches.
func (w *world) view(user string, match func(slacksim.View) bool) slacksim.View {
	w.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		views := w.sim.State().Views[user]
		if n := len(views); n > 0 && match(views[n-1]) {
			return views[n-1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Fatalf("timed out waiting for a modal of %s's; views: %+v", user, w.sim.State().Views)
	return slacksim.View{}
}

// target is the server the agent's http_request calls reach.
type target = testtarget.Server

func newTarget(t *testing.T) *target { return testtarget.New(t) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
