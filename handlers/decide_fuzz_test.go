package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackdir"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// gate is the Slack front end over a real Redis, with one tool that only
// U0BOB may approve and nobody may approve for themselves.
type gate struct {
	srv    *handlers.Server
	http   *httptest.Server
	slack  *slacktest.Server
	svc    *runner.Service
	store  *redisstore.Store
	tool   *agenttest.Tool
	signer slacktest.Signer
	n      atomic.Int64
}

const (
	gateSecret    = "fuzz-secret"
	gateRequester = "U0ALICE"
	gateApprover  = "U0BOB"
)

func newGate(tb testing.TB) *gate { return buildGate(tb, false) }

// buildGate builds the gate; with home, the Home tab is on (the inbox,
// channel membership, the published views).
func buildGate(tb testing.TB, home bool) *gate { return buildGateOn(tb, redistest.Client(tb), home) }

// buildGateOn is buildGate over the Redis client rdb.
func buildGateOn(tb testing.TB, rdb redis.UniversalClient, home bool) *gate {
	g := &gate{slack: slacktest.NewServer(tb), tool: &agenttest.Tool{ToolName: "deploy", NotIdempotent: true}, signer: slacktest.NewSigner(gateSecret)}
	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approval: required, approvers: [U0BOB], self_approval: false}\n"))
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, g.tool)
	if err != nil {
		tb.Fatal(err)
	}
	g.store = redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("gate-%d", time.Now().UnixNano())})
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall {
		return []llm.ToolCall{{Name: "deploy", Arguments: `{"n": 1}`}}
	}}
	a, err := agent.New(model, reg, g.store, agent.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	api := slack.New("xoxb-test", slack.OptionAPIURL(g.slack.URL()))
	rep := handlers.NewReporter(api, g.store, nil, nil)
	lookups := slackdir.NewGroups(api, 0, nil)
	ropts := runner.Options{Audit: true, Groups: lookups}
	hopts := handlers.Options{BotUserID: slacktest.BotUserID}
	if home {
		ropts.Members, ropts.Inbox = lookups, true
		hopts.Home, hopts.TeamURL = g.store, homeTeamURL
	}
	g.svc = runner.New(a, g.store, rep, ropts)
	g.srv = handlers.New(api, g.svc, g.store, gateSecret, hopts)
	if home {
		rep.WithHome(g.srv.Home())
	}
	g.http = httptest.NewServer(g.srv.Handler())
	tb.Cleanup(g.http.Close)
	return g
}

// pending starts a conversation whose call waits for a decision, and
// returns its thread and the card's button value.
func (g *gate) pending(tb testing.TB) (thread, value string) {
	ts := fmt.Sprintf("1700000000.%06d", g.n.Add(1))
	thread = slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, ts)
	err := g.svc.Start(context.Background(), runner.StartRequest{Thread: thread, Requester: gateRequester,
		Team: slacktest.TeamID, Channel: slacktest.ChannelID, Text: "deploy"})
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range g.slack.Messages(slacktest.ChannelID, ts) {
		if v, ok := c.ButtonValue(slackui.ActionApprove); ok {
			return thread, v
		}
	}
	tb.Fatalf("no card in %s", thread)
	return "", ""
}

func (g *gate) send(tb testing.TB, body []byte) {
	req := g.signer.Request(http.MethodPost, g.http.URL+"/slack/interactions", "application/x-www-form-urlencoded", body, time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	// Wait for the work the request left behind: the resume, the tool.
	if err := g.srv.Shutdown(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// check asserts the gate's two promises for thread: every recorded
// decision is one the policy allows, and every execution ran arguments
// whose hash a recorded decision approved.
func (g *gate) check(tb testing.TB, thread string, runsBefore int, mustBeDecided bool) {
	tb.Helper()
	claims, err := g.store.Claims(context.Background(), thread)
	if err != nil {
		tb.Fatal(err)
	}
	approved := map[string]bool{}
	for key, raw := range claims {
		if !strings.HasPrefix(key, "decision:") {
			continue
		}
		var d agent.Decision
		if err := json.Unmarshal(raw, &d); err != nil {
			tb.Fatalf("claim %s: %v", key, err)
		}
		allowed := d.By == gateApprover || (d.Kind == agent.Reject && d.By == gateRequester)
		if !allowed {
			tb.Fatalf("decision %s by %q recorded; the policy allows only %s (and the requester's own rejection)", d.Kind, d.By, gateApprover)
		}
		if d.Kind == agent.Approve || d.Kind == agent.Edit {
			approved[d.Hash] = true
		}
	}
	if mustBeDecided && len(claimsOf(claims, "decision:")) == 0 {
		tb.Fatalf("the approver's click on a real card decided nothing")
	}
	runs := g.tool.Runs()[runsBefore:]
	if len(runs) > 1 {
		tb.Fatalf("deploy ran %d times for one card", len(runs))
	}
	for _, args := range runs {
		if h := tools.ArgsHash("deploy", json.RawMessage(args)); !approved[h] {
			tb.Fatalf("deploy ran with %s (hash %s), which no decision approved (%v)", args, tools.ShortHash(h), approved)
		}
	}
}

// FuzzDecisionPath sends signed interaction payloads — clicks and modal
// submissions by anyone, from any channel, with any reference and any
// edited arguments — against a real pending card.
func FuzzDecisionPath(f *testing.F) {
	f.Add(uint8(1), "", "approve", uint8(0), true, "", false, "", "")
	f.Add(uint8(0), "", "approve", uint8(0), true, "", false, "", "")
	f.Add(uint8(2), "", "reject", uint8(0), true, "", true, "", "no")
	f.Add(uint8(2), "", "edit", uint8(0), true, "", true, `{"n": 2}`, "")
	f.Add(uint8(1), "", "edit", uint8(0), true, "", true, `{"n": 2, "n": 3}`, "")
	f.Add(uint8(1), "", "approve", uint8(1), true, "", false, "", "")
	f.Add(uint8(3), "W0BOB", "retry", uint8(2), false, "0123456789abcdef01234567", false, "", "")
	f.Add(uint8(1), "", "mark_done", uint8(0), true, "", false, "", "")
	f.Add(uint8(0), "", "skip", uint8(0), true, "", false, "", "")
	g := newGate(f)
	users := []string{gateRequester, gateApprover, "U0MALLORY"}
	channels := []string{slacktest.ChannelID, "C0ELSEWHERE", ""}
	f.Fuzz(func(t *testing.T, userSel uint8, userRaw, action string, channelSel uint8, realValue bool, valueRaw string,
		submit bool, args, reason string) {
		thread, value := g.pending(t)
		runsBefore := len(g.tool.Runs())
		user := userRaw
		if int(userSel) < len(users) {
			user = users[userSel]
		}
		if user == "" {
			return // Slack always names the user; a payload without one is a 400
		}
		channel := channels[int(channelSel)%len(channels)]
		if !realValue {
			value = valueRaw
		}
		var body []byte
		if submit {
			callback := slackui.CallbackReject
			if action == slackui.ActionEdit {
				callback = slackui.CallbackEdit
			}
			body = slacktest.ViewSubmission(slacktest.Submission{User: user, CallbackID: callback, PrivateMetadata: value,
				Values: map[string]map[string]string{
					slackui.BlockArgs:   {slackui.InputArgs: args},
					slackui.BlockReason: {slackui.InputReason: reason},
				}})
		} else {
			body = slacktest.BlockActions(slacktest.Click{User: user, Channel: channel, ActionID: action, Value: value})
		}
		g.send(t, body)
		// Then the approver clicks Approve on the card, so that what ran
		// is checked against what was approved whichever decision won.
		g.send(t, slacktest.BlockActions(slacktest.Click{User: gateApprover, ActionID: slackui.ActionApprove, Value: value}))
		g.check(t, thread, runsBefore, realValue)
	})
}

func claimsOf(claims map[string][]byte, prefix string) []string {
	var out []string
	for k := range claims {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}
