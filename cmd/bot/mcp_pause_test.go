package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// roomServer is an MCP server whose book tool answers with an "input
// required" result (the newest protocol's input requests): two questions
// and an opaque state, then, called again with the answers and the state,
// the booking. It records every call it gets.
type roomServer struct {
	url string

	mu     sync.Mutex
	states []string // the requestState of each call, in order
	booked []string
}

func newRoomServer(t *testing.T) *roomServer {
	t.Helper()
	rs := &roomServer{}
	srv := sdk.NewServer(&sdk.Implementation{Name: "rooms", Version: "1"}, nil)
	schema := func(field string) json.RawMessage {
		return json.RawMessage(`{"type":"object","properties":{"` + field + `":{"type":"string","title":"` + field + `"}},"required":["` + field + `"]}`)
	}
	srv.AddTool(&sdk.Tool{Name: "book", Description: "Books a room.", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			rs.mu.Lock()
			defer rs.mu.Unlock()
			rs.states = append(rs.states, req.Params.RequestState)
			who, ok1 := req.Params.InputResponses["who"].(*sdk.ElicitResult)
			room, ok2 := req.Params.InputResponses["room"].(*sdk.ElicitResult)
			if !ok1 || !ok2 || req.Params.RequestState != "opaque-1" {
				return &sdk.CallToolResult{RequestState: "opaque-1", InputRequests: sdk.InputRequestMap{
					"who":  &sdk.ElicitParams{Message: "Booked for whom?", RequestedSchema: schema("name")},
					"room": &sdk.ElicitParams{Message: "Which room?", RequestedSchema: schema("room")},
				}}, nil
			}
			b := fmt.Sprintf("booked %v for %v", room.Content["room"], who.Content["name"])
			rs.booked = append(rs.booked, b)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b}}}, nil
		})
	// Stateless: a server of the newest protocol (a stateful one falls
	// back to asking during the call).
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hs.Close)
	rs.url = hs.URL
	return rs
}

func (rs *roomServer) calls() ([]string, []string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]string(nil), rs.states...), append([]string(nil), rs.booked...)
}

func roomPolicy(rs *roomServer, rules string) string {
	return "mcp_servers:\n  rooms:\n    url: " + rs.url + "\n    approvers: [" + approver + "]\n" + rules
}

// questions waits for the thread's n requests for input.
func (h *harness) questions(root slacktest.Call, n int) []slacktest.Call {
	h.t.Helper()
	var out []slacktest.Call
	h.eventually(func() bool {
		out = out[:0]
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if hasAction(c, "elicit_answer") {
				out = append(out, c)
			}
		}
		return len(out) >= n
	}, "%d requests for input", n)
	return out
}

// answerOn answers the request q on the replica at addr as user, with
// the form's one field set to value, and returns what Slack was told.
func (h *harness) answerOn(addr string, q slacktest.Call, user, field, value string) string {
	h.t.Helper()
	opened := len(h.slack.CallsTo("views.open"))
	if resp := h.clickOn(addr, q, "elicit_answer", user); resp.StatusCode != http.StatusOK {
		h.t.Fatalf("Answer answered %d", resp.StatusCode)
	}
	calls := h.slack.WaitFor(h.t, "views.open", opened+1, 10*time.Second)
	view := decodeView(h.t.(*testing.T), calls[opened])
	resp := h.submitOn(addr, slacktest.Submission{User: user, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"field:" + field: {"value": value}}})
	return readAll(h.t.(*testing.T), resp)
}

// An "input required" result pauses the run like an approval: the forms
// are posted, nothing waits in memory. The replica that showed them is
// killed; another takes the answers (someone else's is refused); the
// call is sent again with the answers and the server's state as it gave
// it, under the approval already given, and finishes once.
func TestMCPInputRequiredIsAPauseThatSurvivesAKilledReplica(t *testing.T) {
	t.Parallel()
	rs := newRoomServer(t)
	h := newHarness(t, roomPolicy(rs, "    expires_after: 24h\n"))
	h.model.Then(
		llmtest.Reply("Booking.", llmtest.Call("c1", "rooms__book", `{}`)),
		llmtest.Reply("Booked."),
	)
	h.command("book me a room", nil, nil)
	root := h.root(1)
	card := h.cardWith(root, "approve", 10*time.Second)
	h.click(card, "approve", approver)
	qs := h.questions(root, 2)
	h.eventually(func() bool { return strings.Contains(h.logs.String(), "run paused for approval") }, "the run to pause")
	// While the form waits, the approval's card says for whose answers,
	// not that the call runs.
	h.eventually(func() bool {
		got := h.card(card)
		return strings.Contains(got, "Waiting for <@"+requester+">'s answers to the server's questions") && !strings.Contains(got, "Running")
	}, "the approval's card to say the call waits for the requester's answers")
	other := h.replica()
	h.kill()

	byText := map[string]slacktest.Call{}
	for _, q := range qs {
		if strings.Contains(h.card(q), "Booked for whom?") {
			byText["who"] = q
		} else {
			byText["room"] = q
		}
	}
	// Someone else cannot answer for the requester.
	h.clickOn(other, byText["who"], "elicit_answer", approver)
	h.ephemeral(approver, "<@"+requester+">")
	if body := h.answerOn(other, byText["who"], requester, "name", "Ada Lovelace"); body != "" {
		t.Fatalf("the first answer was refused: %s", body)
	}
	if states, _ := rs.calls(); len(states) != 1 {
		t.Fatalf("the server was called %d times before every request was answered, want once", len(states))
	}
	if body := h.answerOn(other, byText["room"], requester, "room", "Lovelace room"); body != "" {
		t.Fatalf("the second answer was refused: %s", body)
	}
	h.reply(root, "Booked.")
	states, booked := rs.calls()
	if len(states) != 2 || states[0] != "" || states[1] != "opaque-1" {
		t.Errorf("the server got request states %q; want none, then its own back", states)
	}
	if len(booked) != 1 || booked[0] != "booked Lovelace room for Ada Lovelace" {
		t.Errorf("bookings = %q, want one with both answers", booked)
	}
	if got := lastToolResult(t, h); !strings.Contains(got, "booked Lovelace room for Ada Lovelace") {
		t.Errorf("the model was told %q", got)
	}
	// The approval's card shows how the call ended, not a call that runs.
	h.eventually(func() bool {
		got := h.card(card)
		return strings.Contains(got, "Done") && !strings.Contains(got, "Running")
	},
		"the approval's card to say the call is done")
	// One approval card, one message per request, each answered once.
	cards := 0
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if hasAction(c, "approve") || strings.Contains(c.Text, "rooms__book") && strings.Contains(h.card(c), "Approved by") {
			cards++
		}
	}
	if cards > 1 {
		t.Errorf("%d approval cards, want the one", cards)
	}
	for name, q := range byText {
		if got := h.card(q); strings.Count(got, "Answered by <@"+requester+">") != 1 {
			t.Errorf("the request %s reads %q, want it answered once by the requester", name, got)
		}
	}
	// A second answer to an answered request changes nothing.
	if body := h.answerOn(other, byText["who"], requester, "name", "Grace Hopper"); !strings.Contains(body, "already answered") {
		t.Errorf("a second answer got %q, want it refused", body)
	}
	if states, _ := rs.calls(); len(states) != 2 {
		t.Errorf("the server was called %d times, want 2", len(states))
	}
}

// A request for input that nobody answers before its expiry: the model is
// told so, and an answer after it is refused with words that say so.
func TestMCPInputRequiredExpires(t *testing.T) {
	t.Parallel()
	rs := newRoomServer(t)
	h := newHarness(t, roomPolicy(rs, "    approval: never\n    expires_after: 2s\n"))
	h.model.Then(
		llmtest.Reply("Booking.", llmtest.Call("c1", "rooms__book", `{}`)),
		llmtest.Reply("Nobody answered."),
	)
	h.command("book me a room", nil, nil)
	root := h.root(1)
	qs := h.questions(root, 2)
	h.reply(root, "Nobody answered.")
	if got := lastToolResult(t, h); !strings.Contains(got, "before it expired") {
		t.Errorf("the model was told %q, want that the request expired", got)
	}
	who, room := qs[0], qs[1]
	if !strings.Contains(h.card(who), "Booked for whom?") {
		who, room = qs[1], qs[0]
	}
	// The question nobody touched says it expired, without its buttons.
	h.eventually(func() bool { return strings.Contains(h.card(room), "expired") }, "the unanswered request to say it expired")
	if hasAction(h.latest(room), "elicit_answer") {
		t.Error("the expired request still has its Answer button")
	}
	if body := h.answerOn(h.addr, who, requester, "name", "Ada"); !strings.Contains(body, "expired") {
		t.Errorf("an answer after the expiry got %q, want it to say the request expired", body)
	}
	h.eventually(func() bool { return strings.Contains(h.card(who), "expired") }, "the request to say it expired")
	if states, _ := rs.calls(); len(states) != 1 {
		t.Errorf("the server was called %d times, want once", len(states))
	}
}

// A call that runs as its requester, who has no connection, is a pause:
// nothing is sent, the Connect prompt goes to the requester, and the
// replica that showed it is killed. The authorization server sends the
// browser back to another replica, which completes the connection and
// wakes the thread: the call runs once, with the person's token.
func TestMCPRequesterConnectWaitSurvivesAKilledReplica(t *testing.T) {
	t.Parallel()
	h, srv := oauthHarness(t, "    approval: never\n")
	h.model.Then(
		llmtest.Reply("Checking.", llmtest.Call("c1", "tickets__whoami", `{}`)),
		llmtest.Reply("That is you."),
	)
	h.command("who am I on tickets?", nil, nil)
	root := h.root(1)
	authURL := h.connectPrompt(requester, 1)
	h.eventually(func() bool { return strings.Contains(h.logs.String(), "run paused for approval") }, "the run to pause")
	other := h.replica()
	h.kill()
	if srv.Calls(requester) != 0 {
		t.Fatal("whoami ran before the requester connected")
	}

	status, page := h.browseVia(authURL, requester, other)
	if status != http.StatusOK || !strings.Contains(page, "Connected to tickets") {
		t.Fatalf("callback on the other replica = %d %q, want the connection made", status, page)
	}
	h.reply(root, "That is you.")
	if got := lastToolResult(t, h); !strings.Contains(got, "you are "+requester) {
		t.Errorf("the model was told %q, want the call to run as %s", got, requester)
	}
	if n := srv.Calls(requester); n != 1 {
		t.Errorf("whoami ran %d times as %s, want once", n, requester)
	}
	// The same link again does nothing, and says so.
	if status, _ := h.browseVia(authURL, requester, other); status != http.StatusBadRequest {
		t.Errorf("a second use of the authorization request answered %d, want 400", status)
	}
	tokens := srv.Tokens()
	if len(tokens) == 0 {
		t.Fatal("no token was issued")
	}
	stored, logs := redisText(t, h), h.logs.String()
	for _, tok := range tokens {
		if strings.Contains(stored, tok) || strings.Contains(logs, tok) {
			t.Errorf("a token is in clear in Redis or the logs")
		}
	}
}

// browseVia plays user's browser at authURL, and follows the redirect to
// the bot's callback on the replica at addr instead of the one that made
// the request.
func (h *harness) browseVia(authURL, user, addr string) (int, string) {
	h.t.Helper()
	return h.browseTo(authURL, user, addr)
}
