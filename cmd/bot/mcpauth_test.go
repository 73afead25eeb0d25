package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/mcpauth/mcpauthtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// tokenKey is MCP_TOKEN_KEY in these tests.
const tokenKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

// oauthHarness is a bot whose policy has one auth: requester server, the
// stand-in whoami behind OAuth.
func oauthHarness(t *testing.T, rules string) (*harness, *mcpauthtest.Server) {
	t.Helper()
	srv := mcpauthtest.New(t, mcpauthtest.Options{PublicDiscovery: true})
	h := newHarness(t, fmt.Sprintf("mcp_servers:\n  tickets:\n    url: %s\n    auth: requester\n%s", srv.URL(), rules))
	h.stop()
	h.env = append(h.env, "MCP_TOKEN_KEY="+tokenKey)
	h.start()
	return h, srv
}

// connectPrompt waits for the n-th ephemeral Connect message to user and
// returns the authorization URL of its button.
func (h *harness) connectPrompt(user string, n int) string {
	h.t.Helper()
	var url string
	h.eventually(func() bool {
		var seen int
		for _, c := range h.slack.CallsTo("chat.postEphemeral") {
			if c.User != user || !hasAction(c, slackui.ActionMCPConnect) {
				continue
			}
			if seen++; seen == n {
				url = buttonURL(h.t, c, slackui.ActionMCPConnect)
				return true
			}
		}
		return false
	}, "Connect prompt %d to %s", n, user)
	return url
}

func buttonURL(t testing.TB, c slacktest.Call, actionID string) string {
	t.Helper()
	var blocks []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			URL      string `json:"url"`
		} `json:"elements"`
	}
	_ = json.Unmarshal(c.Blocks, &blocks)
	for _, b := range blocks {
		for _, e := range b.Elements {
			if e.ActionID == actionID {
				return e.URL
			}
		}
	}
	t.Fatalf("no %s button with a URL in %s", actionID, c.Blocks)
	return ""
}

// browse plays user's browser: open the authorization URL, logged in as
// user, and follow the redirect to the bot's callback. It returns the
// callback's status and page.
func (h *harness) browse(authURL, user string) (int, string) {
	h.t.Helper()
	return h.browseTo(authURL, user, "")
}

// browseTo is browse, with the callback taken on the replica at addr
// when addr is not "".
func (h *harness) browseTo(authURL, user, addr string) (int, string) {
	h.t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, authURL, nil)
	req.Header.Set(mcpauthtest.UserHeader, user)
	resp, err := hc.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil {
		h.t.Fatalf("the authorization server answered %s, want a redirect", resp.Status)
	}
	if want := "http://" + h.addr + "/oauth/callback"; addr == "" && !strings.HasPrefix(loc.String(), want) {
		h.t.Fatalf("redirect to %s, want the bot's callback %s", loc, want)
	}
	if addr != "" {
		loc.Host = addr
	}
	resp, err = botClient.Get(loc.String())
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(page)
}

// redisText is every value in Redis, whatever its type, as text.
func redisText(t *testing.T, h *harness) string {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	defer rdb.Close()
	var sb strings.Builder
	iter := rdb.Scan(ctx, 0, "*", 0).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		sb.WriteString(k + "\n")
		switch rdb.Type(ctx, k).Val() {
		case "string":
			sb.WriteString(rdb.Get(ctx, k).Val())
		case "hash":
			fmt.Fprint(&sb, rdb.HGetAll(ctx, k).Val())
		case "list":
			fmt.Fprint(&sb, rdb.LRange(ctx, k, 0, -1).Val())
		case "set":
			fmt.Fprint(&sb, rdb.SMembers(ctx, k).Val())
		case "zset":
			fmt.Fprint(&sb, rdb.ZRange(ctx, k, 0, -1).Val())
		case "stream":
			fmt.Fprint(&sb, rdb.XRange(ctx, k, "-", "+").Val())
		}
		sb.WriteString("\n")
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// A call to an auth: requester server by someone with no connection asks
// them, and only them, to connect; the browser's return to the callback
// lets the call run with their token, once; a revoked connection asks
// again; no token is in Redis in clear, in the logs or in a checkpoint.
func TestMCPRequesterConnectsAndTheCallRunsAsThem(t *testing.T) {
	t.Parallel()
	h, srv := oauthHarness(t, "    approval: never\n")
	h.model.Then(
		llmtest.Reply("Checking.", llmtest.Call("c1", "tickets__whoami", `{}`)),
		llmtest.Reply("That is you."),
	)
	h.command("who am I on tickets?", nil, nil)
	root := h.root(1)
	authURL := h.connectPrompt(requester, 1)
	for _, c := range h.slack.CallsTo("chat.postEphemeral") {
		if hasAction(c, slackui.ActionMCPConnect) && c.User != requester {
			t.Errorf("the Connect prompt went to %s too", c.User)
		}
	}
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if strings.Contains(c.Text+string(c.Blocks), authURL) {
			t.Errorf("the authorization URL is in a message everyone sees: %s", c.Text)
		}
	}
	if srv.Calls(requester) != 0 {
		t.Fatal("whoami ran before the requester connected")
	}
	if status, page := h.browse(authURL, requester); status != http.StatusOK || !strings.Contains(page, "Connected to tickets") {
		t.Fatalf("callback = %d %q, want the connection made", status, page)
	}
	h.reply(root, "That is you.")
	if got := lastToolResult(t, h); !strings.Contains(got, "you are "+requester) {
		t.Errorf("the model was told %q, want the call to run as %s", got, requester)
	}
	if n := srv.Calls(requester); n != 1 {
		t.Errorf("whoami ran %d times as %s, want once", n, requester)
	}
	// The audit trail says whose identity the call ran with.
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	defer rdb.Close()
	records, _ := auditTrail(rdb)
	var as []string
	for _, r := range records {
		if r.Values["event"] == "execution" {
			as = append(as, fmt.Sprint(r.Values["as"]))
		}
	}
	// The attempt that found no connection sent nothing and paused; the
	// one after the callback ran.
	if len(as) != 2 || as[0] != requester || as[1] != requester {
		t.Errorf("audited executions ran as %q, want two attempts as %s", as, requester)
	}
	// The same link again does nothing.
	if status, _ := h.browse(authURL, requester); status != http.StatusBadRequest {
		t.Errorf("a second use of the authorization request answered %d, want 400", status)
	}

	// No token in clear anywhere the bot keeps or shows things.
	tokens := srv.Tokens()
	if len(tokens) == 0 {
		t.Fatal("no token was issued")
	}
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	places := map[string]string{
		"Redis":             redisText(t, h),
		"the logs":          h.logs.String(),
		"checkpoints show":  h.cli(t, "", "checkpoints", "show", "--thread", thread, "--json"),
		"mcp connections":   h.cli(t, "", "mcp", "connections", "--json"),
		"the Slack traffic": fmt.Sprint(h.slack.Calls()),
	}
	for where, text := range places {
		for _, tok := range tokens {
			if strings.Contains(text, tok) {
				t.Errorf("%s holds a token in clear", where)
			}
		}
	}
	if !regexp.MustCompile(`"server":"tickets","user":"` + requester).MatchString(places["mcp connections"]) {
		t.Errorf("bot mcp connections = %s, want %s's connection to tickets", places["mcp connections"], requester)
	}

	// Revoked: the next call asks again, and runs only once connected.
	if out := h.cli(t, "", "mcp", "revoke", "tickets", "--user", requester); !strings.Contains(out, "Revoked") {
		t.Fatalf("bot mcp revoke = %q", out)
	}
	h.model.Then(
		llmtest.Reply("Again.", llmtest.Call("c2", "tickets__whoami", `{}`)),
		llmtest.Reply("Still you."),
	)
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": requester, "text": "and again?", "ts": "1700000100.000100", "thread_ts": root.TS})
	authURL = h.connectPrompt(requester, 2)
	if n := srv.Calls(requester); n != 1 {
		t.Errorf("whoami ran %d times before the new connection, want 1", n)
	}
	if status, _ := h.browse(authURL, requester); status != http.StatusOK {
		t.Fatalf("callback = %d after revoke", status)
	}
	h.reply(root, "Still you.")
	if n := srv.Calls(requester); n != 2 {
		t.Errorf("whoami ran %d times as %s, want 2", n, requester)
	}
}

// Someone who edits the arguments of a call that runs as its requester
// does not get to act as the requester: the call waits for the requester
// to confirm the new arguments, the editor cannot confirm them, and a
// declined confirmation runs nothing.
func TestMCPEditOfARequesterCallWaitsForTheRequester(t *testing.T) {
	t.Parallel()
	h, srv := oauthHarness(t, "")
	h.model.Then(
		llmtest.Reply("Noting.", llmtest.Call("c1", "tickets__whoami", `{"note":"mine"}`)),
		llmtest.Reply("Noted."),
		llmtest.Reply("Again.", llmtest.Call("c2", "tickets__whoami", `{"note":"mine"}`)),
		llmtest.Reply("Not noted."),
	)
	h.command("note it", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.click(card, "edit", approver)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	if resp := h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"args": {"args_input": `{"note":"bob's"}`}}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("edit answered %d", resp.StatusCode)
	}
	question := h.reply(root, "edited its arguments")
	if !strings.Contains(h.card(question), "<@"+requester+">") || !strings.Contains(h.card(question), "bob's") {
		t.Errorf("the confirmation does not name the requester or show the arguments: %s", h.card(question))
	}
	// The editor tries to confirm for the requester.
	h.click(question, "elicit_answer", approver)
	h.ephemeral(approver, "Only <@"+requester+">")
	if srv.Calls(requester) != 0 || len(h.slack.CallsTo("views.open")) != 1 {
		t.Fatal("the editor's click did something")
	}
	// The requester confirms; connects; the call runs as them, once.
	h.click(question, "elicit_answer", requester)
	form := decodeView(t, h.slack.WaitFor(t, "views.open", 2, 10*time.Second)[1])
	if resp := h.submit(slacktest.Submission{User: requester, CallbackID: form.CallbackID, PrivateMetadata: form.PrivateMetadata}); resp.StatusCode != http.StatusOK {
		t.Fatalf("confirming answered %d", resp.StatusCode)
	}
	if status, _ := h.browse(h.connectPrompt(requester, 1), requester); status != http.StatusOK {
		t.Fatalf("callback = %d", status)
	}
	h.reply(root, "Noted.")
	if n := srv.Calls(requester); n != 1 {
		t.Fatalf("whoami ran %d times as %s, want once", n, requester)
	}

	// Next turn: the editor edits again, the requester declines: nothing
	// runs, and the model is told why.
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": requester, "text": "once more", "ts": "1700000100.000100", "thread_ts": root.TS})
	card = h.cards(root, 2)[1]
	h.click(card, "edit", approver)
	view = decodeView(t, h.slack.WaitFor(t, "views.open", 3, 10*time.Second)[2])
	h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"args": {"args_input": `{"note":"bob's again"}`}}})
	var second slacktest.Call
	h.eventually(func() bool {
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if strings.Contains(h.card(c), "bob's again") && hasAction(c, "elicit_decline") {
				second = c
				return true
			}
		}
		return false
	}, "a second confirmation")
	h.click(second, "elicit_decline", requester)
	h.reply(root, "Not noted.")
	if got := lastToolResult(t, h); !strings.Contains(got, "did not confirm") {
		t.Errorf("the model was told %q, want that the requester did not confirm", got)
	}
	if n := srv.Calls(requester); n != 1 {
		t.Errorf("whoami ran %d times as %s, want still once", n, requester)
	}
}

// Enterprise-managed authorization through the binary: a requester with
// no connection gets the Connect button, which opens their identity
// provider's sign-in; back at the callback, their ID token is exchanged
// for an identity assertion grant and that for the server's token, and
// the call runs as them, once. No token of either is in Redis or the
// logs in clear.
func TestMCPRequesterSignsInAtTheIdentityProvider(t *testing.T) {
	t.Parallel()
	idp := mcpauthtest.NewIdP(t)
	srv := mcpauthtest.New(t, mcpauthtest.Options{PublicDiscovery: true, Assertions: idp.Assertion, Client: [2]string{"countersign", "cs-secret-at-tickets"}})
	h := newHarness(t, fmt.Sprintf("mcp_servers:\n  tickets:\n    url: %s\n    auth: requester\n    approval: never\n"+
		"    oauth:\n      client_id: countersign\n      client_secret: cs-secret-at-tickets\n"+
		"      identity_provider: {issuer: %q, client_id: countersign-at-idp}\n", srv.URL(), idp.URL()))
	h.stop()
	h.env = append(h.env, "MCP_TOKEN_KEY="+tokenKey)
	h.start()
	h.model.Then(
		llmtest.Reply("Checking.", llmtest.Call("c1", "tickets__whoami", `{}`)),
		llmtest.Reply("That is you."),
	)
	h.command("who am I on tickets?", nil, nil)
	root := h.root(1)
	authURL := h.connectPrompt(requester, 1)
	if !strings.HasPrefix(authURL, idp.URL()+"/authorize") {
		t.Fatalf("the Connect button opens %s, want the identity provider's sign-in", authURL)
	}
	if srv.Calls(requester) != 0 || idp.Exchanges() != 0 {
		t.Fatal("whoami ran, or a token was exchanged, before the requester signed in")
	}
	if status, _ := h.browse(authURL, requester); status != http.StatusOK {
		t.Fatalf("callback = %d, want the sign-in taken", status)
	}
	h.reply(root, "That is you.")
	if got := lastToolResult(t, h); !strings.Contains(got, "you are "+requester) {
		t.Errorf("the model was told %q, want the call to run as %s", got, requester)
	}
	if n := srv.Calls(requester); n != 1 || idp.Exchanges() != 1 {
		t.Errorf("whoami ran %d times as %s after %d exchanges, want once after one", n, requester, idp.Exchanges())
	}
	stored, logs := redisText(t, h), h.logs.String()
	for _, tok := range srv.Tokens() {
		if strings.Contains(stored, tok) || strings.Contains(logs, tok) {
			t.Error("Redis or the logs hold the server's token in clear")
		}
	}
	if strings.Contains(stored+logs, "idt-") || strings.Contains(stored+logs, "jag-") {
		t.Error("Redis or the logs hold the ID token or the identity assertion grant")
	}
}
