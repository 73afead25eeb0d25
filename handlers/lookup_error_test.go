package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/countersign/countersign/elicit"
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

// flakyMailbox is the store's mailbox whose next deliveries fail.
type flakyMailbox struct {
	*redisstore.Store
	failures atomic.Int64
}

func (m *flakyMailbox) Deliver(ctx context.Context, box string, value []byte, ttl time.Duration) error {
	if m.failures.Add(-1) >= 0 {
		return errors.New("connection refused")
	}
	return m.Store.Deliver(ctx, box, value, ttl)
}

// ephemerals are the texts of the ephemeral messages user got.
func ephemerals(fake *slacktest.Server, user string) []string {
	var out []string
	for _, c := range fake.CallsTo("chat.postEphemeral") {
		if c.Params["user"] == user {
			out = append(out, c.Params["text"])
		}
	}
	return out
}

// An answer to a tool's question whose delivery fails is answered "try
// again" — and the same answer, sent again, is delivered: the failed
// delivery is not taken for an answer given already. Another answer after
// that is refused.
func TestElicitationAnswerAfterAFailedDelivery(t *testing.T) {
	t.Parallel()
	g := buildGate(t, false)
	mail := &flakyMailbox{Store: g.store}
	mail.failures.Store(1)
	api := slack.New("xoxb-test", slack.OptionAPIURL(g.slack.URL()))
	srv := handlers.New(api, g.svc, g.store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, Mailbox: mail})
	web := httptest.NewServer(srv.Handler())
	t.Cleanup(web.Close)
	ctx := context.Background()

	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, "1700000300.000001")
	id := fmt.Sprintf("e%d", time.Now().UnixNano())
	rec, _ := json.Marshal(map[string]any{"thread": thread, "requester": gateRequester, "tool": "deploy", "message": "which region?",
		"schema": json.RawMessage(`{"type":"object","properties":{"region":{"type":"string"}}}`), "deadline": time.Now().Add(time.Hour)})
	if err := g.store.PutRef(ctx, "elicit:"+id, rec, time.Hour); err != nil {
		t.Fatal(err)
	}
	click := func(action string) {
		body := slacktest.BlockActions(slacktest.Click{User: gateRequester, ActionID: action, Value: id})
		resp, err := http.DefaultClient.Do(g.signer.Request(http.MethodPost, web.URL+"/slack/interactions", "application/x-www-form-urlencoded", body, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}

	click(slackui.ActionElicitDecline)
	if got := ephemerals(g.slack, gateRequester); len(got) != 1 || !strings.Contains(got[0], "try again") {
		t.Fatalf("after a failed delivery the person was told %q; want to try again", got)
	}
	click(slackui.ActionElicitDecline)
	if got := ephemerals(g.slack, gateRequester); len(got) != 1 {
		t.Fatalf("the same answer, sent again, was answered %q; want it delivered", got[1:])
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := g.store.Receive(waitCtx, "elicit:"+id)
	if err != nil {
		t.Fatalf("the answer was never delivered: %v", err)
	}
	var ans tools.ElicitAnswer
	if err := json.Unmarshal(raw, &ans); err != nil || ans.Action != tools.ElicitDecline || ans.By != gateRequester {
		t.Fatalf("delivered %s, %v; want the decline", raw, err)
	}
	click(slackui.ActionElicitCancel)
	if got := ephemerals(g.slack, gateRequester); len(got) != 2 || !strings.Contains(got[1], "already answered") {
		t.Fatalf("another answer after the first was answered %q; want \"already answered\"", got)
	}
}

// A thread reply arrives while the user-group look-up of the waiting
// call's approvers fails (Slack's usergroups.users.list answers an error):
// the reply is not kept as a note that rejects nothing, nor settled: it
// stays due. Its attempt tries it again a moment later (no look of the
// intake runs here, and the clock that would let its hold lapse stands
// still), and rejects the call with it, once; the person is told nothing
// in between.
func TestReplyDuringAGroupLookupErrorIsCarriedOn(t *testing.T) {
	t.Parallel()
	ts := fmt.Sprintf("1700000400.%06d", time.Now().UnixNano()%1000000)
	rdb := redistest.Client(t)
	fake := slacktest.NewServer(t)
	fake.SetGroupMembers("S0OPS", gateApprover)
	tool := &agenttest.Tool{ToolName: "deploy", NotIdempotent: true}
	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approval: required, approvers: [S0OPS]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, tool)
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("groups-%d", time.Now().UnixNano())})
	var models atomic.Int64
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall {
		if models.Add(1) == 1 {
			return []llm.ToolCall{{Name: "deploy", Arguments: `{"n": 1}`}}
		}
		return nil
	}}
	a, err := agent.New(model, reg, store, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	api := slack.New("xoxb-test", slack.OptionAPIURL(fake.URL()))
	svc := runner.New(a, store, handlers.NewReporter(api, store, nil, nil), runner.Options{Audit: true, Groups: slackdir.NewGroups(api, 0, nil)})
	now := time.Now()
	clock := func() time.Time { return now }
	srv := handlers.New(api, svc, store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, Now: clock})
	web := httptest.NewServer(srv.Handler())
	t.Cleanup(web.Close)
	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, ts)
	ctx := context.Background()
	if err := svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: gateRequester, Team: slacktest.TeamID,
		Channel: slacktest.ChannelID, Text: "deploy"}); err != nil {
		t.Fatal(err)
	}

	fake.FailNext("usergroups.users.list", "internal_error", 1)
	body := slacktest.EventCallback("", map[string]any{"type": "message", "channel": slacktest.ChannelID, "user": gateApprover,
		"text": "not now, the release is frozen", "ts": fmt.Sprintf("1700000500.%06d", time.Now().UnixNano()%1000000), "thread_ts": ts})
	resp, err := http.DefaultClient.Do(slacktest.NewSigner(gateSecret).Request(http.MethodPost, web.URL+"/slack/events", "application/json", body, clock()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := store.PendingIntake(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reply was never carried on")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.CallsTo("usergroups.users.list")); n < 2 {
		t.Fatalf("the group was looked up %d times, want the failed look-up and another: the test does not test anything", n)
	}
	if got := ephemerals(fake, gateApprover); len(got) != 0 {
		t.Fatalf("the person was told %q; want nothing: their reply was applied", got)
	}
	res, err := svc.State(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	rejections := 0
	for _, m := range res.State.Messages {
		if m.Role == llm.RoleTool && strings.Contains(m.Content, "release is frozen") {
			rejections++
		}
	}
	if rejections != 1 || len(res.State.Notes) != 0 || len(tool.Runs()) != 0 {
		t.Fatalf("the reply rejected the call %d times (notes %v, tool ran %d times); want once, no note, not run",
			rejections, res.State.Notes, len(tool.Runs()))
	}
}

// The root message of /agent cannot be posted because Slack answers a
// transient error: the person is not told the bot cannot post in the
// channel, and the request is not dropped: it stays due, and the intake's
// retry posts one root message and starts the conversation.
func TestSlashCommandDuringASlackErrorIsCarriedOn(t *testing.T) {
	t.Parallel()
	g := buildGate(t, false)
	now := time.Now()
	var later atomic.Bool
	clock := func() time.Time {
		if later.Load() {
			return now.Add(time.Minute)
		}
		return now
	}
	api := slack.New("xoxb-test", slack.OptionAPIURL(g.slack.URL()))
	srv := handlers.New(api, g.svc, g.store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, Now: clock})
	web := httptest.NewServer(srv.Handler())
	t.Cleanup(web.Close)
	ctx := context.Background()

	g.slack.FailNext("chat.postMessage", "internal_error", 1)
	body := slacktest.SlashCommand(map[string][]string{"text": {"deploy"}, "user_id": {gateRequester}, "response_url": {g.slack.ResponseURL()}})
	resp, err := http.DefaultClient.Do(g.signer.Request(http.MethodPost, web.URL+"/slack/commands", "application/x-www-form-urlencoded", body, clock()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	roots := func() int {
		n := 0
		for _, c := range g.slack.Messages(slacktest.ChannelID, "") {
			if strings.Contains(c.Text, "asked:") {
				n++
			}
		}
		return n
	}
	if len(g.slack.CallsTo("chat.postMessage")) == 0 || roots() != 0 {
		t.Fatalf("the root message was not refused (%d posted): the test does not test anything", roots())
	}
	for _, c := range g.slack.Calls() {
		if strings.Contains(c.Params["text"], "couldn't post") || strings.Contains(c.Params["text"], "not in this channel") {
			t.Fatalf("the person was told %q after a transient error", c.Params["text"])
		}
	}
	if n, err := g.store.PendingIntake(ctx); err != nil || n != 1 {
		t.Fatalf("PendingIntake = %d, %v after a transient error; want 1: the acknowledged request was dropped", n, err)
	}

	later.Store(true)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); srv.RunIntake(runCtx, 5*time.Millisecond) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := g.store.PendingIntake(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request was never carried on")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := roots(); n != 1 {
		t.Fatalf("%d root messages posted, want one", n)
	}
	cards := 0
	for _, c := range g.slack.CallsTo("chat.postMessage") {
		if _, ok := c.ButtonValue(slackui.ActionApprove); ok {
			cards++
		}
	}
	if cards != 1 {
		t.Errorf("%d approval cards posted, want the conversation started once", cards)
	}
}

// The error card's Retry while the thread cannot be read: the person is
// told to try again, not left with a click that did nothing.
func TestRetryDuringAStorageErrorSaysTryAgain(t *testing.T) {
	t.Parallel()
	hook := &faultHook{spare: "not-a-key"}
	rdb := redistest.Client(t)
	rdb.AddHook(hook)
	g := buildGateOn(t, rdb, false)
	thread, value := g.pending(t)
	hook.match = strings.Split(thread, ":")[2]
	hook.on.Store(true)
	g.send(t, slacktest.BlockActions(slacktest.Click{User: gateRequester, ActionID: slackui.ActionRetryRun, Value: value}))
	hook.on.Store(false)
	if hook.failed.Load() == 0 {
		t.Fatal("no command met the injected fault: the test does not test anything")
	}
	if got := ephemerals(g.slack, gateRequester); len(got) != 1 || !strings.Contains(got[0], "try again") {
		t.Fatalf("the person was told %q; want to try again", got)
	}
}

// The Home tab is published while the cards' references cannot be read:
// the view says to try again, rather than not being published at all
// (which leaves the click that asked for it unanswered).
func TestHomeTabDuringAStorageErrorSaysTryAgain(t *testing.T) {
	t.Parallel()
	hook := &claimsReadHook{}
	rdb := redistest.Client(t)
	rdb.AddHook(hook)
	g := buildGateOn(t, rdb, true)
	g.pending(t)
	hook.on.Store(true)
	if code, _ := g.post(t, "/slack/events", "application/json", slacktest.AppHomeOpened("", gateApprover)); code != 200 {
		t.Fatalf("app_home_opened = %d", code)
	}
	if err := g.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	hook.on.Store(false)
	if hook.failed.Load() == 0 {
		t.Fatal("no command met the injected fault: the test does not test anything")
	}
	text, approve := homeOf(t, g, gateApprover)
	if len(approve) != 0 || !strings.Contains(text, "try again") {
		t.Fatalf("the Home tab during the error has Approve buttons %v:\n%s\nwant none, and to try again", approve, text)
	}
}

// claimsReadHook fails, while on, every read of a thread's claims hash
// (HGETALL of the whole hash, or HMGET of some of its fields), as a card's
// reference is read.
type claimsReadHook struct {
	on     atomic.Bool
	failed atomic.Int64
}

func (h *claimsReadHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *claimsReadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); h.on.Load() && len(args) >= 2 && (cmd.Name() == "hgetall" || cmd.Name() == "hmget") && strings.HasSuffix(fmt.Sprint(args[1]), "claims") {
			h.failed.Add(1)
			cmd.SetErr(errClusterDown)
			return errClusterDown
		}
		return next(ctx, cmd)
	}
}

func (h *claimsReadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A question nobody answered in time is closed: an answer after that is
// told so, and is not delivered.
func TestElicitationAnsweredTooLate(t *testing.T) {
	t.Parallel()
	g := buildGate(t, false)
	api := slack.New("xoxb-test", slack.OptionAPIURL(g.slack.URL()))
	srv := handlers.New(api, g.svc, g.store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, Mailbox: g.store})
	web := httptest.NewServer(srv.Handler())
	t.Cleanup(web.Close)
	root := "1700000600.000001"
	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, root)
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	el := elicit.New(api, g.store, g.store, nil)
	if _, err := el.Elicit(ctx, tools.Elicitation{Call: tools.CallInfo{Thread: thread, Call: "0.1", Requester: gateRequester, Channel: slacktest.ChannelID},
		Tool: "deploy", Message: "which region?", Schema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string"}}}`)}); err == nil {
		t.Fatal("Elicit answered with nobody answering")
	}
	var id, ts string
	for _, c := range g.slack.Messages(slacktest.ChannelID, root) {
		if v, ok := c.ButtonValue(slackui.ActionElicitDecline); ok {
			id, ts = v, c.TS
		}
	}
	if id == "" {
		t.Fatal("no question posted in the thread")
	}
	if c, _ := g.slack.Message(slacktest.ChannelID, ts); !strings.Contains(c.Text+string(c.Blocks), "Nobody answered in time") {
		t.Errorf("the question after its time: %s %s; want it closed", c.Text, c.Blocks)
	}
	body := slacktest.BlockActions(slacktest.Click{User: gateRequester, ActionID: slackui.ActionElicitDecline, Value: id, MessageTS: ts, ThreadTS: root})
	resp, err := http.DefaultClient.Do(g.signer.Request(http.MethodPost, web.URL+"/slack/interactions", "application/x-www-form-urlencoded", body, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ephemerals(g.slack, gateRequester); len(got) != 1 || !strings.Contains(got[0], "already answered or closed") {
		t.Errorf("a late answer was told %q; want \"already answered or closed\"", got)
	}
}
