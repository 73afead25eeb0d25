package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// faultHook fails every Redis command that names a string in match (and
// no string in spare) while it is on, as a master failing over answers
// the slot it owned.
type faultHook struct {
	on           atomic.Bool
	match, spare string
	failed       atomic.Int64
}

var errClusterDown = errors.New("CLUSTERDOWN The cluster is down")

func (h *faultHook) hits(cmd redis.Cmder) bool {
	if !h.on.Load() {
		return false
	}
	hit := false
	for _, a := range cmd.Args() {
		s := fmt.Sprint(a)
		if strings.Contains(s, h.spare) {
			return false
		}
		hit = hit || strings.Contains(s, h.match)
	}
	return hit
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hits(cmd) {
			h.failed.Add(1)
			cmd.SetErr(errClusterDown)
			return errClusterDown
		}
		return next(ctx, cmd)
	}
}

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.hits(c) {
				h.failed.Add(1)
				for _, c := range cmds {
					c.SetErr(errClusterDown)
				}
				return errClusterDown
			}
		}
		return next(ctx, cmds)
	}
}

// TestReplyDuringAStorageErrorIsCarriedOn: a thread reply arrives while
// the thread's keys cannot be read (its master is failing over) but the
// intake can be written. Slack gets its 200, and the reply must not be
// taken for one in a thread that is not a conversation: it stays due,
// and once the store answers again it is carried on — here, as feedback
// that rejects the waiting call — exactly once.
func TestReplyDuringAStorageErrorIsCarriedOn(t *testing.T) {
	ts := fmt.Sprintf("1700000100.%06d", time.Now().UnixNano()%1000000)
	hook := &faultHook{match: ts, spare: "{intake}"}
	rdb := redistest.Client(t)
	rdb.AddHook(hook)

	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	fake := slacktest.NewServer(t)
	tool := &agenttest.Tool{ToolName: "deploy", NotIdempotent: true}
	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approval: required, approvers: [U0BOB]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, tool)
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("fault-%d", time.Now().UnixNano())})
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
	svc := runner.New(a, store, handlers.NewReporter(api, store, nil, nil), runner.Options{Audit: true})
	srv := handlers.New(api, svc, store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, Now: clock})
	web := httptest.NewServer(srv.Handler())
	t.Cleanup(web.Close)
	signer := slacktest.NewSigner(gateSecret)

	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, ts)
	ctx := context.Background()
	if err := svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: gateRequester, Team: slacktest.TeamID,
		Channel: slacktest.ChannelID, Text: "deploy"}); err != nil {
		t.Fatal(err)
	}

	hook.on.Store(true)
	body := slacktest.EventCallback("", map[string]any{"type": "message", "channel": slacktest.ChannelID, "user": gateApprover,
		"text": "not now, the release is frozen", "ts": fmt.Sprintf("1700000200.%06d", time.Now().UnixNano()%1000000), "thread_ts": ts})
	resp, err := http.DefaultClient.Do(signer.Request(http.MethodPost, web.URL+"/slack/events", "application/json", body, clock()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event answered %d, want 200: the intake is writable", resp.StatusCode)
	}
	if err := srv.Shutdown(ctx); err != nil { // the attempt to carry it on is over
		t.Fatal(err)
	}
	if hook.failed.Load() == 0 {
		t.Fatal("no command met the injected fault: the test does not test anything")
	}
	if n, err := store.PendingIntake(ctx); err != nil || n != 1 {
		t.Fatalf("PendingIntake = %d, %v after a storage error; want 1: the acknowledged reply was dropped", n, err)
	}

	// The fault ends; the intake's retry carries the reply on.
	hook.on.Store(false)
	advance(time.Minute)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); srv.RunIntake(runCtx, 5*time.Millisecond) }()
	// rejections counts the tool results that carry the reply.
	rejections := func() int {
		res, err := svc.State(ctx, thread)
		if err != nil {
			return 0
		}
		n := 0
		for _, m := range res.State.Messages {
			if m.Role == llm.RoleTool && strings.Contains(m.Content, "release is frozen") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for rejections() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reply was never carried on: the waiting call was not rejected with it")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rejections(); n != 1 {
		t.Fatalf("the reply rejected the call %d times, want once", n)
	}
	if n := len(tool.Runs()); n != 0 {
		t.Fatalf("the tool ran %d times; the reply rejected it", n)
	}
	if n, err := store.PendingIntake(ctx); err != nil || n != 0 {
		t.Fatalf("PendingIntake = %d, %v after the reply was carried on; want 0", n, err)
	}
}

// TestReplyAfterAShortStorageErrorIsCarriedOnByItsAttempt: a reply's
// step fails because its thread's master is failing over, and the store
// answers again a moment later. The attempt that holds the request tries
// it again itself: the reply is applied, once, with no look of the
// intake (none runs here, and the clock that would let the hold lapse
// stands still) — the person is answered seconds after a failover, not
// once the hold lapsed.
func TestReplyAfterAShortStorageErrorIsCarriedOnByItsAttempt(t *testing.T) {
	ts := fmt.Sprintf("1700000300.%06d", time.Now().UnixNano()%1000000)
	hook := &faultHook{match: ts, spare: "{intake}"}
	rdb := redistest.Client(t)
	rdb.AddHook(hook)
	now := time.Now()
	clock := func() time.Time { return now }

	fake := slacktest.NewServer(t)
	tool := &agenttest.Tool{ToolName: "deploy", NotIdempotent: true}
	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approval: required, approvers: [U0BOB]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, tool)
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("fault-%d", time.Now().UnixNano())})
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
	svc := runner.New(a, store, handlers.NewReporter(api, store, nil, nil), runner.Options{Audit: true})
	srv := handlers.New(api, svc, store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, Now: clock})
	web := httptest.NewServer(srv.Handler())
	t.Cleanup(web.Close)
	signer := slacktest.NewSigner(gateSecret)

	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, ts)
	ctx := context.Background()
	if err := svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: gateRequester, Team: slacktest.TeamID,
		Channel: slacktest.ChannelID, Text: "deploy"}); err != nil {
		t.Fatal(err)
	}

	hook.on.Store(true)
	body := slacktest.EventCallback("", map[string]any{"type": "message", "channel": slacktest.ChannelID, "user": gateApprover,
		"text": "not now, the release is frozen", "ts": fmt.Sprintf("1700000400.%06d", time.Now().UnixNano()%1000000), "thread_ts": ts})
	resp, err := http.DefaultClient.Do(signer.Request(http.MethodPost, web.URL+"/slack/events", "application/json", body, clock()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event answered %d, want 200: the intake is writable", resp.StatusCode)
	}
	for deadline := time.Now().Add(20 * time.Second); hook.failed.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no command met the injected fault: the test does not test anything")
		}
	}
	hook.on.Store(false) // the failover is over

	rejections := func() int {
		res, err := svc.State(ctx, thread)
		if err != nil {
			return 0
		}
		n := 0
		for _, m := range res.State.Messages {
			if m.Role == llm.RoleTool && strings.Contains(m.Content, "release is frozen") {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); rejections() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reply was not carried on by its attempt once the store answered: it waits for its hold to lapse")
		}
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rejections(); n != 1 {
		t.Fatalf("the reply rejected the call %d times, want once", n)
	}
	if n := len(tool.Runs()); n != 0 {
		t.Fatalf("the tool ran %d times; the reply rejected it", n)
	}
	if n, err := store.PendingIntake(ctx); err != nil || n != 0 {
		t.Fatalf("PendingIntake = %d, %v after the reply was carried on; want 0", n, err)
	}
}
