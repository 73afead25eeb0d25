package main

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// Bad input gets a clear answer and loses nothing (docs/architecture.md,
// Bad input).

func TestRequestsThatFailVerification(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	body := slacktest.SlashCommand(nil)
	body = append(body, []byte("&text=deploy")...)
	url := "http://" + h.addr + "/slack/commands"
	tests := []struct {
		name   string
		req    func() *http.Request
		status int
	}{
		{"no signature", func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			return r
		}, http.StatusUnauthorized},
		{"wrong secret", func() *http.Request {
			return slacktest.NewSigner("not-the-secret").Request(http.MethodPost, url, "application/x-www-form-urlencoded", body, time.Now())
		}, http.StatusUnauthorized},
		{"six minutes old", func() *http.Request {
			return h.signer.Request(http.MethodPost, url, "application/x-www-form-urlencoded", body, time.Now().Add(-6*time.Minute))
		}, http.StatusUnauthorized},
		{"six minutes ahead", func() *http.Request {
			return h.signer.Request(http.MethodPost, url, "application/x-www-form-urlencoded", body, time.Now().Add(6*time.Minute))
		}, http.StatusUnauthorized},
		{"body over 1 MiB", func() *http.Request {
			big := append(slacktest.SlashCommand(nil), []byte("&text="+strings.Repeat("x", 1<<20))...)
			return h.signer.Request(http.MethodPost, url, "application/x-www-form-urlencoded", big, time.Now())
		}, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		resp, err := botClient.Do(tt.req())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.status)
		}
	}
	h.quiet()
	if n := len(h.slack.CallsTo("chat.postMessage")); n != 0 || len(h.model.Requests()) != 0 {
		t.Errorf("refused requests were processed: %d messages, %d model calls", n, len(h.model.Requests()))
	}
	if strings.Contains(h.logs.String(), "text=deploy") || strings.Contains(h.logs.String(), signingSecret) {
		t.Error("the logs contain a request body or the signing secret")
	}
}

func TestMalformedPayloads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	tests := []struct {
		path, contentType, body string
	}{
		{"/slack/commands", "application/x-www-form-urlencoded", "%zz=1"},
		{"/slack/commands", "application/x-www-form-urlencoded", "text=hello"}, // no channel or user
		{"/slack/interactions", "application/x-www-form-urlencoded", "payload={not json"},
		{"/slack/interactions", "application/x-www-form-urlencoded", "nothing=here"},
		{"/slack/events", "application/json", `{"type":"event_callback","event":`},
	}
	for _, tt := range tests {
		resp := h.send(tt.path, tt.contentType, []byte(tt.body), nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s %q: status %d, want 400", tt.path, tt.body, resp.StatusCode)
		}
	}
}

func TestURLVerification(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	resp := h.send("/slack/events", "application/json", []byte(`{"type":"url_verification","challenge":"c-123","token":"x"}`), nil)
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"challenge":"c-123"`) {
		t.Errorf("url_verification answered %d %s", resp.StatusCode, body)
	}
}

func TestForgedAndRefusedClicks(t *testing.T) {
	t.Parallel()
	policy := "tools:\n  http_request:\n    approvers: [U0BOSS, S0ADMINS]\n    self_approval: false\n"
	h := newHarness(t, policy)
	h.slack.SetGroupMembers("S0ADMINS", "U0ADMIN")
	root, card := h.deployFlow("Deployed.")

	// A value the server never handed out.
	body := slacktest.BlockActions(slacktest.Click{User: "U0BOSS", Channel: card.Channel, MessageTS: card.TS, ThreadTS: card.ThreadTS, ActionID: "approve", Value: "forged0000000000"})
	h.send("/slack/interactions", "application/x-www-form-urlencoded", body, nil)
	h.ephemeral("U0BOSS", "no longer pending")

	// Not an approver; and the requester, who may not approve their own.
	h.click(card, "approve", "U0RANDOM")
	h.ephemeral("U0RANDOM", "You can't decide this call")
	h.click(card, "approve", requester)
	h.ephemeral(requester, "You can't decide this call")
	h.click(card, "edit", "U0RANDOM")
	h.ephemeral("U0RANDOM", "You can't decide this call")
	h.quiet()
	if n := h.target.Count("POST /deploy"); n != 0 || !strings.Contains(h.card(card), `"action_id":"approve"`) || len(h.slack.CallsTo("views.open")) != 0 {
		t.Fatalf("refused clicks changed something: %d runs, card %s", n, h.card(card))
	}
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	defer rdb.Close()
	audit, err := auditTrail(rdb)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, e := range audit {
		if e.Values["decision"] == "refused" {
			refused++
		}
	}
	if refused != 3 {
		t.Errorf("audit has %d refused clicks, want 3: %v", refused, audit)
	}

	// A member of the approvers' user group may approve.
	h.click(card, "approve", "U0ADMIN")
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times after the group member approved, want 1", n)
	}
	// The call's outcome is written as the run lets go of the thread,
	// just after the answer is posted.
	h.eventually(func() bool {
		audit, _ = auditTrail(rdb)
		return audit[len(audit)-1].Values["event"] == "outcome"
	}, "the call's outcome in the audit trail")
	var events []string
	for _, e := range audit[len(audit)-3:] {
		events = append(events, fmt.Sprint(e.Values["event"], "/", e.Values["decision"], "/", e.Values["outcome"], "/", e.Values["by"]))
	}
	approval := audit[len(audit)-3].Values
	if want := "decision/approve/<nil>/U0ADMIN execution/approve/<nil>/U0ADMIN outcome/approve/done/U0ADMIN"; strings.Join(events, " ") != want ||
		!strings.Contains(approval["args"].(string), "/deploy") {
		t.Errorf("last audit records = %v (%v); want %s, with the arguments", events, approval, want)
	}
}

func TestModelDownThenRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	// Four failures: every attempt of the bot's retries fails.
	h.model.FailNext(4, http.StatusServiceUnavailable)
	h.command("hello", nil, nil)
	root := h.root(1)
	errCard := h.cardWith(root, "retry_run", 20*time.Second)
	if n := len(h.model.Requests()); n != 4 {
		t.Errorf("the model was tried %d times before giving up; want 4, with backoff", n)
	}
	h.model.Then(llmtest.Reply("Hello again."))
	h.click(errCard, "retry_run", requester)
	h.reply(root, "Hello again.")
}

func TestRedisDown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Hi."))
	h.redis.Kill()
	resp, err := botClient.Get("http://" + h.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz with Redis down = %d, want 503", resp.StatusCode)
	}
	if body := readAll(t, h.command("hello", nil, nil)); !strings.Contains(body, "try again") || !strings.Contains(body, "ephemeral") {
		t.Errorf("/agent with Redis down answered %q; want an ephemeral 'try again'", body)
	}
	h.redis.Restart()
	h.eventually(func() bool {
		resp, err := botClient.Get("http://" + h.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "/readyz to recover")
	h.command("hello", nil, nil)
	h.reply(h.root(1), "Hi.")
}
