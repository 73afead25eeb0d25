package handlers_test

import (
	"context"
	"errors"
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
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
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

// faultyThread is a conversation waiting on a risky deploy for Bob's
// approval, served by a handlers.Server whose Redis client fails every
// command about the thread (not the intake's) while hook is on.
type faultyThread struct {
	hook   *faultHook
	tool   *agenttest.Tool
	store  *redisstore.Store
	svc    *runner.Service
	srv    *handlers.Server
	web    *httptest.Server
	thread string
	clock  func() time.Time
	logs   *logtest.Hook // the handlers' and the runner's log
}

func newFaultyThread(t *testing.T, ts string, clock func() time.Time) *faultyThread {
	t.Helper()
	f := &faultyThread{hook: &faultHook{match: ts, spare: "{intake}"}, clock: clock}
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.SetLevel(logrus.DebugLevel)
	f.logs = logtest.NewLocal(log)
	rdb := redistest.Client(t)
	rdb.AddHook(f.hook)
	fake := slacktest.NewServer(t)
	f.tool = &agenttest.Tool{ToolName: "deploy", NotIdempotent: true}
	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approval: required, approvers: [U0BOB]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, f.tool)
	if err != nil {
		t.Fatal(err)
	}
	f.store = redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("fault-%d", time.Now().UnixNano())})
	var models atomic.Int64
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall {
		if models.Add(1) == 1 {
			return []llm.ToolCall{{Name: "deploy", Arguments: `{"n": 1}`}}
		}
		return nil
	}}
	a, err := agent.New(model, reg, f.store, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	api := slack.New("xoxb-test", slack.OptionAPIURL(fake.URL()))
	f.svc = runner.New(a, f.store, handlers.NewReporter(api, f.store, nil, nil), runner.Options{Audit: true, Logger: log})
	f.srv = handlers.New(api, f.svc, f.store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, Now: clock, Logger: log})
	f.web = httptest.NewServer(f.srv.Handler())
	t.Cleanup(f.web.Close)
	f.thread = slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, ts)
	if err := f.svc.Start(context.Background(), runner.StartRequest{Thread: f.thread, Requester: gateRequester, Team: slacktest.TeamID,
		Channel: slacktest.ChannelID, Text: "deploy"}); err != nil {
		t.Fatal(err)
	}
	return f
}

// reply sends Bob's thread reply that rejects the deploy; Slack must get
// its 200 (the intake is writable).
func (f *faultyThread) reply(t *testing.T, threadTS string) {
	t.Helper()
	body := slacktest.EventCallback("", map[string]any{"type": "message", "channel": slacktest.ChannelID, "user": gateApprover,
		"text": "not now, the release is frozen", "ts": fmt.Sprintf("1700000900.%06d", time.Now().UnixNano()%1000000), "thread_ts": threadTS})
	resp, err := http.DefaultClient.Do(slacktest.NewSigner(gateSecret).Request(http.MethodPost, f.web.URL+"/slack/events", "application/json", body, f.clock()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event answered %d, want 200: the intake is writable", resp.StatusCode)
	}
}

// rejections counts the tool results that carry the reply.
func (f *faultyThread) rejections() int {
	res, err := f.svc.State(context.Background(), f.thread)
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

// rejectedOnce waits for the reply to reject the call, and checks that
// it did so once, the tool never ran, and no request is left due.
func (f *faultyThread) rejectedOnce(t *testing.T, why string, beforeChecks func()) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); f.rejections() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
	}
	if beforeChecks != nil {
		beforeChecks()
	}
	if err := f.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.rejections(); n != 1 {
		t.Fatalf("the reply rejected the call %d times, want once", n)
	}
	if n := len(f.tool.Runs()); n != 0 {
		t.Fatalf("the tool ran %d times; the reply rejected it", n)
	}
	if n, err := f.store.PendingIntake(context.Background()); err != nil || n != 0 {
		t.Fatalf("PendingIntake = %d, %v after the reply was carried on; want 0", n, err)
	}
}

// TestReplyDuringAStorageErrorIsCarriedOn: a thread reply arrives while
// the thread's keys cannot be read (its master is failing over) but the
// intake can be written. Slack gets its 200, and the reply must not be
// taken for one in a thread that is not a conversation: it stays due,
// and once the store answers again it is carried on — here, as feedback
// that rejects the waiting call — exactly once.
func TestReplyDuringAStorageErrorIsCarriedOn(t *testing.T) {
	t.Parallel()
	ts := fmt.Sprintf("1700000100.%06d", time.Now().UnixNano()%1000000)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f := newFaultyThread(t, ts, clock)
	ctx := context.Background()

	f.hook.on.Store(true)
	f.reply(t, ts)
	if err := f.srv.Shutdown(ctx); err != nil { // the attempt to carry it on is over
		t.Fatal(err)
	}
	if f.hook.failed.Load() == 0 {
		t.Fatal("no command met the injected fault: the test does not test anything")
	}
	if n, err := f.store.PendingIntake(ctx); err != nil || n != 1 {
		t.Fatalf("PendingIntake = %d, %v after a storage error; want 1: the acknowledged reply was dropped", n, err)
	}

	// The fault ends; the intake's retry carries the reply on.
	f.hook.on.Store(false)
	advance(time.Minute)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.srv.RunIntake(runCtx, 5*time.Millisecond) }()
	f.rejectedOnce(t, "the reply was never carried on: the waiting call was not rejected with it", func() { stop(); <-done })
}

// TestReplyAfterAShortStorageErrorIsCarriedOnByItsAttempt: a reply's
// step fails because its thread's master is failing over, and the store
// answers again a moment later. The attempt that holds the request tries
// it again itself: the reply is applied, once, with no look of the
// intake (none runs here, and the clock that would let the hold lapse
// stands still) — the person is answered seconds after a failover, not
// once the hold lapsed.
func TestReplyAfterAShortStorageErrorIsCarriedOnByItsAttempt(t *testing.T) {
	t.Parallel()
	ts := fmt.Sprintf("1700000300.%06d", time.Now().UnixNano()%1000000)
	now := time.Now()
	f := newFaultyThread(t, ts, func() time.Time { return now })

	f.hook.on.Store(true)
	f.reply(t, ts)
	for deadline := time.Now().Add(20 * time.Second); f.hook.failed.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no command met the injected fault: the test does not test anything")
		}
	}
	f.hook.on.Store(false) // the failover is over
	f.rejectedOnce(t, "the reply was not carried on by its attempt once the store answered: it waits for its hold to lapse", nil)
}

// TestStepFailingForSecondsIsOneWarning: a reply's step fails try after
// try while its thread's master fails over, then the store answers. The
// operator reads one warning for the request, with the error, not one
// per try: the tries after the first say so at info, with their number,
// and a last line says that the request was carried on, after how many
// tries. The reply is applied once.
func TestStepFailingForSecondsIsOneWarning(t *testing.T) {
	t.Parallel()
	ts := fmt.Sprintf("1700000500.%06d", time.Now().UnixNano()%1000000)
	now := time.Now()
	f := newFaultyThread(t, ts, func() time.Time { return now })
	tries := func() (warned, info int) { return f.tries(replyStepFailed) }

	f.hook.on.Store(true)
	f.reply(t, ts)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, info := tries(); info >= 3 {
			break
		}
		if time.Now().After(deadline) {
			warned, info := tries()
			t.Fatalf("after 20 s, %d warnings and %d tries again at info of %q; want the step tried again 3 times", warned, info, replyStepFailed)
		}
	}
	f.hook.on.Store(false) // the failover is over
	f.rejectedOnce(t, "the reply was not carried on by its attempt once the store answered", nil)

	if warned, _ := tries(); warned != 1 {
		t.Errorf("%d warnings of %q, want 1: the tries after the first are at info", warned, replyStepFailed)
	}
	var warnings []string
	carried := false
	for _, e := range f.logs.AllEntries() {
		// The record of what the thread showed, written within a second
		// of its showing, may meet the failover too: that is the
		// runner's own warning, not a try of the step.
		if e.Level <= logrus.WarnLevel && e.Message != replyStepFailed && e.Message != "recording what was shown" {
			warnings = append(warnings, e.Message)
		}
		if e.Message == "the request was carried on after its step failed" {
			carried = true
			if n, _ := e.Data["attempts"].(int); n < 4 {
				t.Errorf("carried on after %v tries, want 4 or more", e.Data["attempts"])
			}
		}
	}
	if len(warnings) > 0 {
		t.Errorf("other warnings during the failover: %q", warnings)
	}
	if !carried {
		t.Error("no line says the request was carried on in the end")
	}
}

// TestStepFailingPastTheHoldIsLeftDueWithAWarning: a reply's step fails
// for longer than its attempt holds the request (the store answers only
// minutes later). The attempt gives up with a last warning that says how
// many tries failed, after the first one's; the request stays due for the
// intake, and no try in between was a warning. (What else fails on the
// thread meanwhile, a record of what was shown, warns of itself.)
func TestStepFailingPastTheHoldIsLeftDueWithAWarning(t *testing.T) {
	t.Parallel()
	ts := fmt.Sprintf("1700000700.%06d", time.Now().UnixNano()%1000000)
	now := time.Now()
	f := newFaultyThread(t, ts, func() time.Time { return now })
	const gaveUp = "the request's step still fails; it stays due, and is driven again once its hold lapses"

	f.hook.on.Store(true)
	f.reply(t, ts)
	var last *logrus.Entry
	for deadline := time.Now().Add(60 * time.Second); last == nil; time.Sleep(20 * time.Millisecond) {
		for _, e := range f.logs.AllEntries() {
			if e.Message == gaveUp {
				last = e
			}
		}
		if last == nil && time.Now().After(deadline) {
			t.Fatal("after 60 s the attempt has not given up on a step that fails for good")
		}
	}
	if err := f.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := last.Data["attempts"].(int); last.Level != logrus.WarnLevel || n < 5 {
		t.Errorf("the last line is at %s after %v tries; want a warning after 5 or more", last.Level, last.Data["attempts"])
	}
	if warned, info := f.tries(replyStepFailed); warned != 1 || info < 4 {
		t.Errorf("the step's failure: %d warnings and %d tries again at info; want 1 warning (the first try's), the others at info", warned, info)
	}
	if n, err := f.store.PendingIntake(context.Background()); err != nil || n != 1 {
		t.Fatalf("PendingIntake = %d, %v once the attempt gave up; want 1: the reply stays due", n, err)
	}
}

// replyStepFailed is what the handlers log when a reply's step fails on
// the store.
const replyStepFailed = "handling a reply; it stays due and is tried again"

// tries counts the log lines msg: the warnings, and the lines at info of
// tries after an attempt's first (with their number, "attempt").
func (f *faultyThread) tries(msg string) (warned, info int) {
	for _, e := range f.logs.AllEntries() {
		switch {
		case e.Message != msg:
		case e.Level == logrus.WarnLevel:
			warned++
		case e.Level == logrus.InfoLevel && e.Data["attempt"] != nil:
			info++
		}
	}
	return warned, info
}
