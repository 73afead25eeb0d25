package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// holdHook makes storage as slow as a test needs: while it is on, every
// Redis command runs, and its reply is held until release is closed. A
// reply held for giveUp anyway is let go and counted, so that code which
// waits for storage before it opens a modal fails the test instead of
// hanging it.
type holdHook struct {
	on      atomic.Bool
	release chan struct{}
	held    atomic.Int64
	early   atomic.Int64
}

const giveUp = 10 * time.Second

func (h *holdHook) hold() {
	if !h.on.Load() {
		return
	}
	h.held.Add(1)
	select {
	case <-h.release:
	case <-time.After(giveUp):
		h.early.Add(1)
	}
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.hold()
		return err
	}
}

func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.hold()
		return err
	}
}

// slowGate is a gate whose storage a holdHook slows.
func slowGate(t *testing.T) (*gate, *holdHook) {
	hook := &holdHook{release: make(chan struct{})}
	rdb := redistest.Client(t)
	rdb.AddHook(hook)
	return buildGateOn(t, rdb, false), hook
}

// slowClick presses a button while every storage reply is held, and
// returns the views.open call it made: it must make it before any reply
// comes back, for Slack refuses a trigger 3 seconds after the click.
// Then the replies are let go, and slowClick waits for everything the
// click set off.
func (g *gate) slowClick(t *testing.T, hook *holdHook, c slacktest.Click) slacktest.Call {
	t.Helper()
	hook.on.Store(true)
	answered := make(chan int, 1)
	go func() {
		req := g.signer.Request(http.MethodPost, g.http.URL+"/slack/interactions", "application/x-www-form-urlencoded", slacktest.BlockActions(c), time.Now())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	var opened []slacktest.Call
	for len(opened) == 0 {
		if hook.early.Load() > 0 {
			hook.on.Store(false)
			close(hook.release)
			t.Fatalf("a storage reply was held %s and the click had not opened a modal: its trigger would have expired", giveUp)
		}
		opened = g.slack.CallsTo("views.open")
		time.Sleep(5 * time.Millisecond)
	}
	hook.on.Store(false)
	close(hook.release)
	if hook.held.Load() == 0 {
		t.Fatal("no storage reply was held: the test does not slow anything")
	}
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("the click answered %d, want 200", code)
	}
	if err := g.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(opened) != 1 || opened[0].Params["trigger_id"] != c.TriggerID || !opened[0].OK() {
		t.Fatalf("views.open calls = %+v; want one, with the click's trigger", opened)
	}
	return opened[0]
}

// shownView is the view of the one views.update after a slow click: it
// must replace the view the click opened.
func (g *gate) shownView(t *testing.T) (callbackID, metadata, blocks string) {
	t.Helper()
	updates := g.slack.CallsTo("views.update")
	if len(updates) != 1 || !updates[0].OK() || updates[0].Params["view_id"] == "" {
		t.Fatalf("views.update calls = %+v; want one that fills in the opened modal", updates)
	}
	var v struct {
		CallbackID      string          `json:"callback_id"`
		PrivateMetadata string          `json:"private_metadata"`
		Blocks          json.RawMessage `json:"blocks"`
	}
	if err := json.Unmarshal([]byte(updates[0].Params["view"]), &v); err != nil {
		t.Fatal(err)
	}
	return v.CallbackID, v.PrivateMetadata, string(v.Blocks)
}

// Edit under storage slow enough to spend Slack's 3 seconds on the checks
// before the modal: the modal opens on the fresh trigger before any
// storage reply, the form fills it once the checks answer, and its
// submission approves the edited call, which runs once.
func TestEditModalOpensBeforeSlowStorage(t *testing.T) {
	t.Parallel()
	g, hook := slowGate(t)
	_, value := g.pending(t)
	g.slowClick(t, hook, slacktest.Click{User: gateApprover, ActionID: slackui.ActionEdit, Value: value, TriggerID: "trigger.edit-slow"})

	callback, metadata, blocks := g.shownView(t)
	if callback != slackui.CallbackEdit || metadata != value || !strings.Contains(blocks, `\"n\": 1`) {
		t.Fatalf("the modal shows %s %q %s; want the edit form with the call's arguments", callback, metadata, blocks)
	}
	g.send(t, slacktest.ViewSubmission(slacktest.Submission{User: gateApprover, CallbackID: callback, PrivateMetadata: metadata,
		Values: map[string]map[string]string{slackui.BlockArgs: {slackui.InputArgs: `{"n": 2}`}}}))
	if runs := g.tool.Runs(); len(runs) != 1 || !strings.Contains(string(runs[0]), `2`) {
		t.Fatalf("deploy ran %q; want once, with the edited arguments", runs)
	}
}

// Reject under slow storage on a call that was approved and ran since: the
// modal opened at once says so, rather than a message in the thread.
func TestRejectModalOfADecidedCallSaysSo(t *testing.T) {
	t.Parallel()
	g, hook := slowGate(t)
	_, value := g.pending(t)
	g.send(t, slacktest.BlockActions(slacktest.Click{User: gateApprover, ActionID: slackui.ActionApprove, Value: value}))
	if n := len(g.tool.Runs()); n != 1 {
		t.Fatalf("deploy ran %d times after its approval, want once", n)
	}
	g.slowClick(t, hook, slacktest.Click{User: gateRequester, ActionID: slackui.ActionReject, Value: value, TriggerID: "trigger.reject-slow"})

	callback, _, blocks := g.shownView(t)
	var sections []struct{ Text struct{ Text string } }
	if err := json.Unmarshal([]byte(blocks), &sections); err != nil {
		t.Fatal(err)
	}
	if callback != "" || len(sections) != 1 || !strings.HasPrefix(sections[0].Text.Text, "Already approved by <@"+gateApprover+">") {
		t.Fatalf("the modal shows %q %s; want no form, and who approved the call", callback, blocks)
	}
	if n := len(g.slack.CallsTo("chat.postEphemeral")); n != 0 {
		t.Errorf("%d messages in the thread as well; the modal says it", n)
	}
}
