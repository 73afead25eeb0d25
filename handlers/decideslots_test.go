package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// heldTool is the gate's tool whose first call waits until released.
type heldTool struct {
	*agenttest.Tool
	arrived chan struct{}
	release chan struct{}
	first   chan struct{} // holds one token: the call that waits
}

func (h heldTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	select {
	case <-h.first:
		close(h.arrived)
		<-h.release
	default:
	}
	return h.Tool.Call(ctx, args)
}

// TestClickWhenNoBackgroundSlotIsFree: the click's decision and its drive
// are one background job, whose claim the request waits for. When every
// background slot is taken (here the one slot, by a click whose call is
// still running), a click does not wait for one: its decision is
// recorded in the request and answered, and its drive runs once a slot
// is free. Each call runs once.
func TestClickWhenNoBackgroundSlotIsFree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := &gate{slack: slacktest.NewServer(t), tool: &agenttest.Tool{ToolName: "deploy", NotIdempotent: true}, signer: slacktest.NewSigner(gateSecret)}
	held := heldTool{Tool: g.tool, arrived: make(chan struct{}), release: make(chan struct{}), first: make(chan struct{}, 1)}
	held.first <- struct{}{}
	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approval: required, approvers: [U0BOB], self_approval: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, held)
	if err != nil {
		t.Fatal(err)
	}
	g.store = redisstore.New(redistest.Client(t), redisstore.Options{Prefix: fmt.Sprintf("slots-%d", time.Now().UnixNano())})
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "deploy", Arguments: `{"n": 1}`}} }}
	a, err := agent.New(model, reg, g.store, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	api := slack.New("xoxb-test", slack.OptionAPIURL(g.slack.URL()))
	g.svc = runner.New(a, g.store, handlers.NewReporter(api, g.store, nil, nil), runner.Options{Audit: true})
	g.srv = handlers.New(api, g.svc, g.store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, MaxConcurrentWork: 1})
	g.http = httptest.NewServer(g.srv.Handler())
	t.Cleanup(g.http.Close)

	_, first := g.pending(t)
	_, second := g.pending(t)
	// A click, answered without waiting for the work it leaves behind.
	click := func(value string) {
		t.Helper()
		body := slacktest.BlockActions(slacktest.Click{User: gateApprover, ActionID: slackui.ActionApprove, Value: value})
		req := g.signer.Request(http.MethodPost, g.http.URL+"/slack/interactions", "application/x-www-form-urlencoded", body, time.Now())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("click answered %d", resp.StatusCode)
		}
	}
	click(first)
	select {
	case <-held.arrived: // the first click's job holds the one slot
	case <-time.After(30 * time.Second):
		t.Fatal("the first approved call never ran")
	}
	click(second) // answered while the slot is taken
	if n := len(g.tool.Runs()); n != 0 {
		t.Fatalf("%d calls ran while the first was held", n)
	}
	close(held.release)
	if err := g.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if runs := g.tool.Runs(); len(runs) != 2 {
		t.Errorf("the tool ran %d times, want once per click: %q", len(runs), runs)
	}
	for _, e := range g.slack.CallsTo("chat.postEphemeral") {
		if strings.Contains(e.Text, "try again") || strings.Contains(e.Text, "no longer pending") {
			t.Errorf("a click was answered %q", e.Text)
		}
	}
}
