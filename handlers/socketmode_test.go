package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/tools"
)

// socketSlack plays Slack's side of Socket Mode: apps.connections.open
// hands out a WebSocket URL, and each connection gets the next batch of
// envelopes, whose acks are collected. Every other Web API method goes to
// the slacktest fake.
type socketSlack struct {
	*httptest.Server
	web *slacktest.Server

	mu       sync.Mutex
	batches  [][]map[string]any // envelopes per connection, in order
	conns    int
	acks     map[string]json.RawMessage
	ackCount map[string]int
	// ackWait is how long an envelope waits for its ack before the
	// connection is closed (default 10s), as Slack gives up on it and
	// delivers it again.
	ackWait time.Duration
}

func newSocketSlack(t *testing.T, web *slacktest.Server, batches ...[]map[string]any) *socketSlack {
	s := &socketSlack{web: web, batches: batches, acks: map[string]json.RawMessage{}, ackCount: map[string]int{}}
	webURL, _ := url.Parse(web.URL())
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: webURL.Scheme, Host: webURL.Host})
	mux := http.NewServeMux()
	mux.HandleFunc("/api/apps.connections.open", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer xapp-test" {
			http.Error(w, `{"ok":false,"error":"not_authed"}`, http.StatusOK)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "url": "ws" + strings.TrimPrefix(s.URL, "http") + "/link"})
	})
	mux.HandleFunc("/link", s.link)
	mux.Handle("/", proxy)
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// link serves one connection: hello, the next batch, acks, then a close —
// which the client must survive by reconnecting.
func (s *socketSlack) link(w http.ResponseWriter, r *http.Request) {
	// Slack does not check the Origin header; neither does this fake.
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	s.mu.Lock()
	var batch []map[string]any
	if s.conns < len(s.batches) {
		batch = s.batches[s.conns]
	}
	s.conns++
	s.mu.Unlock()
	_ = conn.WriteJSON(map[string]any{"type": "hello", "num_connections": 1})
	for _, env := range batch {
		if err := conn.WriteJSON(env); err != nil {
			return
		}
		wait := 10 * time.Second
		if s.ackWait > 0 {
			wait = s.ackWait
		}
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if err := conn.ReadJSON(&ack); err != nil {
			return
		}
		s.mu.Lock()
		s.acks[ack.EnvelopeID] = ack.Payload
		s.ackCount[ack.EnvelopeID]++
		s.mu.Unlock()
	}
	if len(batch) == 0 {
		// Nothing more to send: hold the connection until the test ends.
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		_, _, _ = conn.ReadMessage()
		return
	}
	_ = conn.WriteJSON(map[string]any{"type": "disconnect", "reason": "refresh_requested"})
}

func (s *socketSlack) ack(id string) (json.RawMessage, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks[id], s.ackCount[id]
}

func TestSocketMode(t *testing.T) {
	t.Parallel()
	web := slacktest.NewServer(t)
	command, _ := url.ParseQuery(string(slacktest.SlashCommand(url.Values{"text": {"say hi"}, "user_id": {"U0ALICE"}})))
	cmdPayload := map[string]string{}
	for k := range command {
		cmdPayload[k] = command.Get(k)
	}
	help := map[string]string{"team_id": slacktest.TeamID, "channel_id": slacktest.ChannelID, "user_id": "U0ALICE", "text": "help", "trigger_id": "t.help"}
	mention := json.RawMessage(slacktest.EventCallback("Ev1", map[string]any{"type": "app_mention", "channel": slacktest.ChannelID,
		"user": "U0ALICE", "text": "<@" + slacktest.BotUserID + "> hello there", "ts": "1800000000.000001"}))
	sock := newSocketSlack(t, web,
		[]map[string]any{
			{"envelope_id": "env-help", "type": "slash_commands", "payload": help, "accepts_response_payload": true},
			{"envelope_id": "env-cmd", "type": "slash_commands", "payload": cmdPayload, "accepts_response_payload": true},
		},
		// After a disconnect, the client reconnects and gets the next batch.
		[]map[string]any{
			{"envelope_id": "env-mention", "type": "events_api", "payload": mention},
			{"envelope_id": "env-mention-retry", "type": "events_api", "payload": mention, "retry_attempt": 1},
		},
	)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := slack.New("xoxb-test", slack.OptionAPIURL(sock.URL+"/api/"), slack.OptionAppLevelToken("xapp-test"))
	store := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: "socket-" + time.Now().Format("150405.000000000")})
	// Two runs go at once; each answer depends on its request.
	answer := func(_ context.Context, msgs []llm.Message, _ []llm.ToolDef) (llm.Message, error) {
		if msgs[len(msgs)-1].Content == "hello there" {
			return llm.Message{Content: "Hello to you."}, nil
		}
		return llm.Message{Content: "Hi!"}, nil
	}
	model := llmtest.NewScripted().ThenFunc(answer).ThenFunc(answer)
	reg, err := tools.NewRegistry(tools.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(model, reg, store, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep := handlers.NewReporter(api, store, nil, nil)
	svc := runner.New(a, store, rep, runner.Options{})
	logger := logrus.New()
	logger.Out = testWriter{t}
	srv := handlers.New(api, svc, store, "", handlers.Options{BotUserID: slacktest.BotUserID, Logger: logger})
	done := make(chan error, 1)
	go func() { done <- srv.RunSocketMode(ctx, socketmode.New(api)) }()

	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		// Both runs answered: the mention's in its thread, and the slash
		// command's asked the model too (the two go at once).
		// Acks travel over the socket, answers over the Web API: each
		// is waited for.
		_, mentions := sock.ack("env-mention-retry")
		_, helps := sock.ack("env-help")
		_, cmds := sock.ack("env-cmd")
		if mentions > 0 && helps > 0 && cmds > 0 && len(web.Messages(slacktest.ChannelID, "1800000000.000001")) > 0 && len(model.Requests()) >= 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if payload, n := sock.ack("env-help"); n != 1 || !strings.Contains(string(payload), "ephemeral") {
		t.Errorf("help ack = %s (%d acks); want one ack carrying the ephemeral usage", payload, n)
	}
	if _, n := sock.ack("env-cmd"); n != 1 {
		t.Errorf("slash command acked %d times, want 1", n)
	}
	var roots []string
	for _, c := range web.CallsTo("chat.postMessage") {
		if c.ThreadTS == "" {
			roots = append(roots, c.Text)
		}
	}
	if len(roots) != 1 || roots[0] != "<@U0ALICE> asked: say hi" {
		t.Errorf("root messages = %q; want the slash command's", roots)
	}
	if msgs := web.Messages(slacktest.ChannelID, "1800000000.000001"); len(msgs) != 1 || msgs[0].Text != "Hello to you." {
		t.Errorf("the mention's thread has %v; want one answer (the retried delivery is ignored)", msgs)
	}
	if reqs := model.Requests(); len(reqs) != 2 {
		t.Errorf("the model was called %d times, want 2", len(reqs))
	}
	sock.mu.Lock()
	conns := sock.conns
	sock.mu.Unlock()
	if conns < 2 {
		t.Errorf("%d connections; the client should have reconnected after the disconnect", conns)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("RunSocketMode did not return after its context ended")
	}
	_ = srv.Shutdown(context.Background())
}

// testWriter sends the server's log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// An event that cannot be stored (the intake's keys fail, as while their
// master fails over) is not acknowledged over Socket Mode — its HTTP twin
// is answered 503 — so that Slack delivers it again; an ack would drop it
// for good. The delivery that follows is stored and answered once.
func TestSocketModeEventNotStoredIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	web := slacktest.NewServer(t)
	mention := json.RawMessage(slacktest.EventCallback("Ev7", map[string]any{"type": "app_mention", "channel": slacktest.ChannelID,
		"user": "U0ALICE", "text": "<@" + slacktest.BotUserID + "> hello there", "ts": "1800000700.000001"}))
	sock := newSocketSlack(t, web,
		[]map[string]any{{"envelope_id": "env-first", "type": "events_api", "payload": mention}},
		[]map[string]any{{"envelope_id": "env-again", "type": "events_api", "payload": mention, "retry_attempt": 1}},
	)
	sock.ackWait = time.Second

	hook := &faultHook{match: "{intake}", spare: "not-a-key"}
	hook.on.Store(true)
	rdb := redistest.Client(t)
	rdb.AddHook(hook)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := slack.New("xoxb-test", slack.OptionAPIURL(sock.URL+"/api/"), slack.OptionAppLevelToken("xapp-test"))
	store := redisstore.New(rdb, redisstore.Options{Prefix: "socket-" + time.Now().Format("150405.000000000")})
	model := llmtest.NewScripted().Then(llm.Message{Content: "Hello to you."})
	reg, err := tools.NewRegistry(tools.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(model, reg, store, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := runner.New(a, store, handlers.NewReporter(api, store, nil, nil), runner.Options{})
	srv := handlers.New(api, svc, store, "", handlers.Options{BotUserID: slacktest.BotUserID})
	done := make(chan error, 1)
	go func() { done <- srv.RunSocketMode(ctx, socketmode.New(api)) }()

	deadline := time.Now().Add(20 * time.Second)
	for hook.failed.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the event's intake was never written: the test does not test anything")
		}
		time.Sleep(5 * time.Millisecond)
	}
	hook.on.Store(false) // the store answers again
	for len(web.Messages(slacktest.ChannelID, "1800000700.000001")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the mention was never answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The ack travels over the socket, the answer over the Web API: the
	// answer can be seen before the ack is read.
	for {
		if _, n := sock.ack("env-again"); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the delivery that was stored was never acknowledged")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	_ = srv.Shutdown(context.Background())
	if _, n := sock.ack("env-first"); n != 0 {
		t.Errorf("the delivery that could not be stored was acknowledged %d times; want none, so that Slack delivers it again", n)
	}
	if _, n := sock.ack("env-again"); n != 1 {
		t.Errorf("the delivery that was stored was acknowledged %d times, want once", n)
	}
	if msgs := web.Messages(slacktest.ChannelID, "1800000700.000001"); len(msgs) != 1 || msgs[0].Text != "Hello to you." {
		t.Errorf("the mention's thread has %v; want one answer", msgs)
	}
}
