package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// modelGate stands between the bot and the test model: it holds the
// first request the bot sends until released, and passes every request
// on as it came. It holds a conversation's start while its first answer
// is being made, the moment a reply in its thread is kept for it.
type modelGate struct {
	srv      *httptest.Server
	to       atomic.Pointer[string]
	first    sync.Once
	arrived  chan struct{}
	released chan struct{}
	release  func()
}

func newModelGate(t *testing.T) *modelGate {
	g := &modelGate{arrived: make(chan struct{}), released: make(chan struct{})}
	g.release = sync.OnceFunc(func() { close(g.released) })
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(func() {
		g.release()
		g.srv.Close()
	})
	return g
}

// URL is the base URL the bot is given instead of the test model's.
func (g *modelGate) URL() string { return g.srv.URL + "/v1" }

func (g *modelGate) serve(w http.ResponseWriter, r *http.Request) {
	g.first.Do(func() {
		close(g.arrived)
		<-g.released
	})
	to := g.to.Load()
	if to == nil {
		http.Error(w, "no model behind the gate", http.StatusBadGateway)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, *to+strings.TrimPrefix(r.URL.Path, "/v1"), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// masterOf is the address of the master that owns key's slot.
func masterOf(t *testing.T, cluster *redistest.ReplicatedCluster, key string) string {
	t.Helper()
	m, err := cluster.Client.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatalf("the master of %s: %v", key, err)
	}
	return m.Options().Addr
}

// The questions and answers of failoverOfAKeptReply.
const (
	keptStartQuestion = "what is the capital of Italy?"
	keptStartAnswer   = "Rome."
	keptReplyQuestion = "and how many people live there?"
	keptReplyAnswer   = "About 2.8 million people."
)

// (i) A reply in a conversation's thread comes while the conversation's
// first answer is being made: it is acknowledged (Slack will not send it
// again) and kept for the start's first save. The thread's replica lags
// as it is kept; then the master dies and the replica takes over without
// what it lacks (or the replica catches up). The reply must be answered,
// once, within two lease periods of the failover — not dropped with the
// kept copy only the dead master had, nor answered at the intake's next
// look minutes later, nor twice.
func failoverOfAReplyKeptDuringTheStartTest(t *testing.T) {
	for _, kill := range []bool{true, false} {
		name := "lag/catch up"
		if kill {
			name = "lag/kill"
		}
		t.Run(name, func(t *testing.T) { failoverOfAKeptReply(t, kill) })
	}
}

func failoverOfAKeptReply(t *testing.T, kill bool) {
	gate := newModelGate(t)
	// Without streaming, a start opens no thread before its first save:
	// a reply meanwhile is kept for that save (runner/starting.go).
	h, cluster := newClusterHarness(t, waitReplicas, "OPENAI_BASE_URL="+gate.URL(), "SLACK_STREAMING=off")
	url := h.model.URL()
	gate.to.Store(&url)
	h.model.Then(llmtest.Reply(keptStartAnswer), llmtest.Reply(keptReplyAnswer))

	// The conversation starts at a mention whose thread is in a slot of
	// another master than the intake's: the intake acknowledges the
	// reply while the thread's replica lags.
	intakeMaster := masterOf(t, cluster, intakeKey)
	var root slacktest.Call
	for i := 1; ; i++ {
		root = slacktest.Call{Channel: slacktest.ChannelID, TS: fmt.Sprintf("1800000100.%06d", i)}
		if masterOf(t, cluster, threadKey(root)) != intakeMaster {
			break
		}
	}
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	keptKey := "cs:{" + thread + "}:kept"
	h.eventWithRetries("Ev0KEPTSTART", map[string]any{"type": "app_mention", "channel": root.Channel, "user": requester,
		"text": "<@" + slacktest.BotUserID + "> " + keptStartQuestion, "ts": root.TS}, func() {})
	h.within(30*time.Second, func() bool {
		select {
		case <-gate.arrived:
			return true
		default:
			return false
		}
	}, "the start to ask the model")

	lag := cluster.LagReplica(t, threadKey(root))
	h.eventWithRetries("Ev0KEPTREPLY", map[string]any{"type": "message", "channel": root.Channel, "user": requester,
		"text": keptReplyQuestion, "ts": "1800000200.000001", "thread_ts": root.TS}, func() {})
	h.within(30*time.Second, func() bool {
		n, _ := cluster.Client.LLen(context.Background(), keptKey).Result()
		return n > 0
	}, "the reply to be kept on the thread's master")
	if kill {
		lag.TakeOver()
		lag.Rejoin()
	} else {
		lag.CatchUp()
	}
	gate.release()
	since := time.Now()

	h.recovered(root, keptReplyAnswer, since)
	h.within(6*leasePeriod, func() bool {
		n, err := cluster.Client.ZCard(context.Background(), intakeKey).Result()
		return err == nil && n == 0
	}, "the intake to have no request left to carry on")
	h.waitStatusOnCluster(root, "done")
	if n := h.asked(keptReplyQuestion); n != 1 {
		t.Errorf("the model was asked %q %d times, want once", keptReplyQuestion, n)
	}
	for _, answer := range []string{keptStartAnswer, keptReplyAnswer} {
		if n := h.answers(root, answer); n != 1 {
			t.Errorf("%q was posted %d times, want once", answer, n)
		}
	}
	h.noStorageErrors(root)
}

// (j) On a single server with a replica, an Approve click is claimed
// by the very save that marks the call running, and that save appends
// the call's execution to the audit trail. The replica stalls: no
// replica acknowledges the save, so the call is not sent. Whatever the
// replica gets later, the trail must not say the call was sent: its
// execution entry is followed by an "unsent" outcome, and then by the
// execution that did send it, once; nobody is asked to settle a call
// that was never sent, and the call runs once.
func TestUnconfirmedRunningSaveOnASingleServerSaysUnsent(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "")
	replica := redistest.StartReplica(t, h.redis)
	h.env = append(h.env, waitReplicas)
	h.start()
	root, card := h.deployFlow("Deployed.")
	h.waitStatusOnCluster(root, "paused")
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	events := func() []redis.XMessage {
		entries, _ := auditTrail(rdb)
		return entries
	}

	replica.Pause()
	resume := sync.OnceFunc(replica.Resume)
	defer resume()
	// The click's request is answered once the claim is known: sent
	// as Slack does, without waiting for it here.
	body := slacktest.BlockActions(slacktest.Click{User: approver, Channel: card.Channel, MessageTS: card.TS, ThreadTS: card.ThreadTS,
		ActionID: "approve", Value: buttonValue(t, card, "approve")})
	req := h.signer.Request(http.MethodPost, "http://"+h.addr+"/slack/interactions", "application/x-www-form-urlencoded", body, time.Now())
	clicked := make(chan struct{})
	go func() {
		defer close(clicked)
		if resp, err := botClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	t.Cleanup(func() { <-clicked })
	h.within(30*time.Second, func() bool {
		for _, e := range events() {
			if e.Values["event"] == "execution" {
				return true
			}
		}
		return false
	}, "the call's execution in the audit trail on the master")
	// The save that marks the call running is the thread's second; a
	// third on the master says what became of it (the wait for the
	// replica fell short, and the call was not sent).
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	h.within(30*time.Second, func() bool {
		cp, err := redisstore.New(rdb, redisstore.Options{Prefix: "cs"}).Head(context.Background(), thread)
		return err == nil && cp.Seq >= 3
	}, "the save after the running one on the master")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Errorf("deploy ran %d times on a save no replica had acknowledged", n)
	}
	resume()
	h.recovered(root, "Deployed.", time.Now())
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if hasAction(c, slackui.ActionRetry) || hasAction(c, slackui.ActionMarkDone) || strings.Contains(h.card(c), "may or may not have taken effect") {
			t.Errorf("people were asked to settle a call that was never sent: %s", h.card(c))
		}
	}
	var trail []string
	h.within(30*time.Second, func() bool {
		trail = trail[:0]
		for _, e := range events() {
			ev, _ := e.Values["event"].(string)
			if out, ok := e.Values["outcome"].(string); ok {
				ev += ":" + out
			}
			trail = append(trail, ev)
		}
		return len(trail) > 0 && strings.HasPrefix(trail[len(trail)-1], "outcome:") && !strings.HasSuffix(trail[len(trail)-1], ":unsent")
	}, "the call's outcome in the audit trail")
	if got, want := strings.Join(trail, " "), "decision execution outcome:unsent execution outcome:done"; got != want {
		t.Errorf("audit trail = %s, want %s", got, want)
	}
}
