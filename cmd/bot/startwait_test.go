package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// get fetches a path of the bot: its status and body, or 0 if it does
// not answer.
func (h *harness) get(path string) (int, string) {
	resp, err := botClient.Get("http://" + h.addr + path)
	if err != nil {
		return 0, ""
	}
	return resp.StatusCode, readAll(h.t.(*testing.T), resp)
}

// clickAny sends user's click of Approve on a card the bot cannot look
// up.
func (h *harness) clickAny(user string) {
	h.t.Helper()
	body := slacktest.BlockActions(slacktest.Click{User: user, Channel: slacktest.ChannelID, MessageTS: "1700000000.000200",
		ActionID: slackui.ActionApprove, Value: "x"})
	resp := h.send("/slack/interactions", "application/x-www-form-urlencoded", body, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.t.Errorf("a click = %d, want 200 (and an answer that says to try again)", resp.StatusCode)
	}
}

// waitingForRedis launches the bot with its Redis down, and waits until
// it says, on /readyz, that it waits for it.
func waitingForRedis(t *testing.T) *harness {
	t.Helper()
	h := newIdleHarness(t, "")
	h.redis.Kill()
	h.launch()
	h.eventually(func() bool {
		code, body := h.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for Redis")
	}, "/readyz to say the bot waits for Redis")
	return h
}

// A bot started before its Redis listens, serves at once: alive, not
// ready (and why), Slack asked to try again; when Redis comes, it
// finishes starting by itself and an approval runs its call once.
func TestServeWaitsForRedis(t *testing.T) {
	t.Parallel()
	h := waitingForRedis(t)

	if code, _ := h.get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while waiting for Redis = %d, want 200: the process is alive", code)
	}
	code, body := h.get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, h.redis.Addr()) || !strings.Contains(body, "connection refused") {
		t.Errorf("/readyz while waiting for Redis = %d %q, want 503 naming the Redis and why", code, body)
	}
	// Slack's requests are answered as during an outage.
	resp := h.command("deploy", nil, nil)
	if got := readAll(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(got, slackui.TextTryAgain) {
		t.Errorf("/agent while waiting for Redis = %d %q, want the ephemeral try-again", resp.StatusCode, got)
	}
	resp = h.event("Ev-waiting", map[string]any{"type": "app_mention", "channel": slacktest.ChannelID, "user": requester,
		"ts": "1700000000.000100", "text": "<@" + slacktest.BotUserID + "> deploy"})
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		t.Errorf("an event while waiting for Redis was acknowledged (%d): Slack would not deliver it again", resp.StatusCode)
	}
	h.clickAny(approver)
	h.ephemeral(approver, slackui.TextTryAgain)
	if n := len(h.roots()); n != 0 {
		t.Errorf("%d requests were started while waiting for Redis, want none", n)
	}
	if n := strings.Count(h.logs.String(), "Redis does not answer: waiting"); n != 1 {
		t.Errorf("the first failure was logged %d times, want once; logs:\n%s", n, h.logs.String())
	}

	h.redis.Restart()
	h.within(60*time.Second, func() bool {
		code, _ := h.get("/readyz")
		return code == http.StatusOK
	}, "/readyz to turn 200 once Redis answers")
	h.eventually(func() bool { return strings.Contains(h.logs.String(), startupLine) }, "the start-up line")
	if logs := h.logs.String(); !strings.Contains(logs, "Redis answered after") {
		t.Errorf("the start-up line does not say the bot waited for Redis; logs:\n%s", logs)
	}

	root, card := h.deployFlow("Deployed v2.")
	h.click(card, "approve", approver)
	h.reply(root, "Deployed v2.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("the approved call ran %d times, want 1", n)
	}
}

// While the bot waits for Redis, an unsigned request is refused and
// makes the bot post nothing.
func TestWaitingForRedisStillVerifiesSlack(t *testing.T) {
	t.Parallel()
	h := waitingForRedis(t)
	body := slacktest.BlockActions(slacktest.Click{User: "U0MALLORY", Channel: slacktest.ChannelID, MessageTS: "1700000000.000200",
		ActionID: slackui.ActionApprove, Value: "x"})
	req, err := http.NewRequest(http.MethodPost, "http://"+h.addr+"/slack/interactions", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := botClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an unsigned click while waiting for Redis = %d, want 401", resp.StatusCode)
	}
	// A signed click after it is answered: once its answer is posted,
	// the unsigned one would have been too.
	h.clickAny(approver)
	h.ephemeral(approver, slackui.TextTryAgain)
	for _, c := range h.slack.Calls() {
		if c.User == "U0MALLORY" {
			t.Errorf("the bot posted to the sender of an unsigned request: %s", c.Method)
		}
	}
}

// SIGTERM while the bot waits for Redis ends it at once, with status 0.
func TestStopWhileWaitingForRedis(t *testing.T) {
	t.Parallel()
	h := waitingForRedis(t)
	if err := h.bot.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- h.bot.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the bot stopped while waiting for Redis with %v, want status 0", err)
		}
	case <-time.After(20 * time.Second):
		// Well within the 30 s of the longest wait between tries and of
		// the shutdown's grace, which a bot that did not stop at once
		// would take; generous for a busy machine.
		t.Errorf("the bot still ran 20s after SIGTERM while waiting for Redis; logs:\n%s", h.logs.String())
		_ = h.bot.Process.Kill()
		<-exited
	}
	h.bot = nil
}

// What waiting cannot mend still stops the bot at once, with its one
// line, Redis down or not.
func TestServeRefusesBadConfigWithoutWaiting(t *testing.T) {
	t.Parallel()
	slack := slacktest.NewServer(t)
	missing := filepath.Join(t.TempDir(), "no-such-policy.yaml")
	bad := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(bad, []byte("tools: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	down := "redis://127.0.0.1:" + strings.TrimPrefix(freeAddr(t), "127.0.0.1:") + "/0" // nothing listens
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"REDIS_URL not a URL", []string{"REDIS_URL=redis://:pa/ss@word@127.0.0.1:6379/0"}, "REDIS_URL is not a URL"},
		{"policy missing", []string{"REDIS_URL=" + down, "BOT_POLICY=" + missing}, "no-such-policy.yaml"},
		{"policy unreadable", []string{"REDIS_URL=" + down, "BOT_POLICY=" + bad}, "policy"},
		{"REDIS_WAIT_REPLICAS", []string{"REDIS_URL=" + down, "REDIS_WAIT_REPLICAS=two"}, "REDIS_WAIT_REPLICAS"},
		{"AUDIT_RETENTION", []string{"REDIS_URL=" + down, "AUDIT_RETENTION=forever"}, "AUDIT_RETENTION"},
		{"REDIS_CLUSTER", []string{"REDIS_URL=" + down, "REDIS_CLUSTER=yes"}, `REDIS_CLUSTER="yes"`},
		{"MCP_TOKEN_KEY", []string{"REDIS_URL=" + down, "MCP_TOKEN_KEY=short"}, "openssl rand -base64 32"},
	} {
		env := append([]string{"SLACK_BOT_TOKEN=" + botToken, "SLACK_SIGNING_SECRET=" + signingSecret, "SLACK_API_URL=" + slack.URL(),
			"BOT_ADDR=127.0.0.1:0"}, tc.env...)
		out, code := runBot(t, env, "", "serve")
		// A bot that waited for Redis first would say "waiting for it",
		// and go on waiting until runBot gives up (code -1).
		if code != 1 || !strings.Contains(out, tc.want) || strings.Contains(out, "waiting for it") {
			t.Errorf("%s: bot serve exited %d with:\n%s\nwant exit 1 before waiting for Redis, saying %q", tc.name, code, out, tc.want)
		}
		if strings.Contains(out, "pa/ss") {
			t.Errorf("%s: the password of REDIS_URL is in the output:\n%s", tc.name, out)
		}
	}
}

// A request that comes while the bot is being wired, its Redis up, is
// served once it is, as when it waited in the listener's queue: not told
// to try again.
func TestRequestDuringStartIsServed(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "")
	arrived, release := h.slack.HoldNext("auth.test", 0)
	defer release()
	h.launch()
	<-arrived // the bot listens, and is not wired yet
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")))
	answered := make(chan string, 1)
	go func() {
		body := slacktest.SlashCommand(url.Values{"text": {"deploy"}, "user_id": {requester}})
		resp, err := botClient.Do(h.signer.Request(http.MethodPost, "http://"+h.addr+"/slack/commands", "application/x-www-form-urlencoded", body, time.Now()))
		if err != nil {
			answered <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	h.eventually(func() bool {
		code, body := h.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "starting")
	}, "/readyz to say the bot is starting")
	release()
	if got := <-answered; got != "200 " {
		t.Errorf("/agent during start-up was answered %q; want an empty 200, and the request served", got)
	}
	h.cards(h.root(1), 1)
}
