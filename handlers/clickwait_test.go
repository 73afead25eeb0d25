package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// keyHold holds, while on, the reply of every Redis command that names a
// key containing key, until release is closed; a reply held for giveUp
// anyway is let go and counted (early), so that code which waits for it
// fails the test instead of hanging it. held is closed at the first.
type keyHold struct {
	key     string
	on      atomic.Bool
	release chan struct{}
	held    chan struct{}
	once    sync.Once
	early   atomic.Int64
}

func (h *keyHold) names(cmd redis.Cmder) bool {
	for _, a := range cmd.Args() {
		switch s := a.(type) {
		case string:
			if strings.Contains(s, h.key) {
				return true
			}
		case *string:
			if s != nil && strings.Contains(*s, h.key) {
				return true
			}
		}
	}
	return false
}

func (h *keyHold) hold(cmds ...redis.Cmder) {
	if !h.on.Load() {
		return
	}
	for _, cmd := range cmds {
		if !h.names(cmd) {
			continue
		}
		h.once.Do(func() { close(h.held) })
		select {
		case <-h.release:
		case <-time.After(giveUp):
			h.early.Add(1)
		}
		return
	}
}

func (h *keyHold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *keyHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.hold(cmd)
		return err
	}
}

func (h *keyHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.hold(cmds...)
		return err
	}
}

// TestClickRequestEndsBeforeItsClaimAnswers: a click's decision is
// taken in a background job, and the request waits for the claim's
// answer. When Slack gives up on the request first (its connection
// closes), the handler returns without waiting longer; the job goes on,
// and once storage answers the decision is recorded and the call runs
// once.
func TestClickRequestEndsBeforeItsClaimAnswers(t *testing.T) {
	hook := &keyHold{key: "}:lease", release: make(chan struct{}), held: make(chan struct{})}
	rdb := redistest.Client(t)
	rdb.AddHook(hook)
	g := buildGateOn(t, rdb, false)
	thread, value := g.pending(t)

	// The claim takes the thread's lease: its reply is held.
	hook.on.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := slacktest.BlockActions(slacktest.Click{User: gateApprover, ActionID: slackui.ActionApprove, Value: value})
	req := g.signer.Request(http.MethodPost, g.http.URL+"/slack/interactions", "application/x-www-form-urlencoded", body, time.Now()).WithContext(ctx)
	sent := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	select {
	case <-hook.held:
	case err := <-sent:
		close(hook.release)
		t.Fatalf("the click was answered (%v) before its claim reached storage", err)
	}
	cancel() // Slack gives up on the request
	<-sent
	// Close waits for every request the server is still handling: the
	// click's handler must return while its claim's answer is held.
	g.http.Close()
	if hook.early.Load() > 0 {
		t.Fatal("the click's request waited for its claim after the request had ended")
	}
	hook.on.Store(false)
	close(hook.release)
	if err := g.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.check(t, thread, 0, true)
	if runs := g.tool.Runs(); len(runs) != 1 {
		t.Fatalf("the approved call ran %d times, want once", len(runs))
	}
}
