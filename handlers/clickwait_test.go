package handlers_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"slices"
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
	t.Parallel()
	hook := &keyHold{key: "}:lease", release: make(chan struct{}), held: make(chan struct{})}
	rdb := redistest.Client(t)
	rdb.AddHook(hook)
	g := buildGateOn(t, rdb, false)
	thread, value := g.pending(t)

	// The claim takes the thread's lease: its reply is held.
	hook.on.Store(true)
	g.clickGivenUp(t, value, hook.held, hook.release)
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
	// The person was told the truth: the decision was being recorded,
	// not "try again" (clicking again would hear "already approved").
	if told := ephemeralsTo(g, gateApprover); !slices.Equal(told, []string{slackui.TextRecording}) {
		t.Errorf("the approver was told %q, want %q alone", told, slackui.TextRecording)
	}
}

// ephemeralsTo lists the ephemeral messages sent to user, in order.
func ephemeralsTo(g *gate, user string) []string {
	var out []string
	for _, e := range g.slack.CallsTo("chat.postEphemeral") {
		if e.User == user {
			out = append(out, e.Text)
		}
	}
	return out
}

// linkPause pauses, while armed, a client's link to Redis before it
// sends a command whose bytes hold every one of markers: the command
// reaches Redis only once release is closed (or after giveUp, counted in
// early, so that a test that never releases fails instead of hanging).
// held is closed when the first is paused.
type linkPause struct {
	markers [][]byte
	armed   atomic.Bool
	release chan struct{}
	held    chan struct{}
	once    sync.Once
	early   atomic.Int64
}

func (p *linkPause) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &pausedConn{Conn: conn, p: p}, nil
	}
}

func (p *linkPause) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *linkPause) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type pausedConn struct {
	net.Conn
	p *linkPause
}

func (c *pausedConn) Write(b []byte) (int, error) {
	if c.p.armed.Load() && c.p.names(b) {
		c.p.once.Do(func() { close(c.p.held) })
		select {
		case <-c.p.release:
		case <-time.After(giveUp):
			c.p.early.Add(1)
		}
		// The pause is not the link's: the command goes out with the
		// time it would have had.
		_ = c.Conn.SetWriteDeadline(time.Time{})
	}
	return c.Conn.Write(b)
}

func (p *linkPause) names(b []byte) bool {
	for _, m := range p.markers {
		if !bytes.Contains(b, m) {
			return false
		}
	}
	return true
}

// TestClickWhoseLateClaimLoses: the approver's click reaches storage
// late — its claim is held on the way to Redis — and Slack gives up on
// the request meanwhile. The approver is told the decision is being
// recorded. The requester then rejects the call; when the approver's
// claim reaches Redis it loses, and the job tells the approver, in the
// thread, who decided first. The call never runs.
func TestClickWhoseLateClaimLoses(t *testing.T) {
	t.Parallel()
	pause := &linkPause{markers: [][]byte{[]byte(`"by":"` + gateApprover + `"`), []byte("}:lease")},
		release: make(chan struct{}), held: make(chan struct{})}
	rdb := redis.NewClient(redistest.Options(t))
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(pause)
	g := buildGateOn(t, rdb, false)
	thread, value := g.pending(t)

	pause.armed.Store(true)
	g.clickGivenUp(t, value, pause.held, pause.release)
	g.slack.WaitFor(t, "chat.postEphemeral", 1, giveUp)
	if told := ephemeralsTo(g, gateApprover); !slices.Equal(told, []string{slackui.TextRecording}) {
		close(pause.release)
		t.Fatalf("the approver was told %q when the request ended, want %q", told, slackui.TextRecording)
	}

	// The requester rejects the call meanwhile.
	reject := slacktest.ViewSubmission(slacktest.Submission{User: gateRequester, CallbackID: slackui.CallbackReject, PrivateMetadata: value,
		Values: map[string]map[string]string{slackui.BlockReason: {slackui.InputReason: "not today"}}})
	resp, err := http.DefaultClient.Do(g.signer.Request(http.MethodPost, g.http.URL+"/slack/interactions", "application/x-www-form-urlencoded", reject, time.Now()))
	if err != nil {
		close(pause.release)
		t.Fatal(err)
	}
	resp.Body.Close()

	pause.armed.Store(false)
	close(pause.release)
	if err := g.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pause.early.Load() > 0 {
		t.Fatal("the approver's claim was let go by the pause's give-up, not by the test")
	}
	told := ephemeralsTo(g, gateApprover)
	if len(told) != 2 || told[0] != slackui.TextRecording || !strings.Contains(told[1], "Already rejected") || !strings.Contains(told[1], gateRequester) {
		t.Errorf("the approver was told %q; want %q, then who rejected the call first", told, slackui.TextRecording)
	}
	if runs := g.tool.Runs(); len(runs) != 0 {
		t.Errorf("the rejected call ran %d times", len(runs))
	}
	g.check(t, thread, 0, true)
}

// clickGivenUp sends the approver's click on value and, once held says
// its claim is held on the way to storage, gives the request up as Slack
// does after its deadline, and waits for the handler to return. It
// closes release if the click is answered first.
func (g *gate) clickGivenUp(t *testing.T, value string, held <-chan struct{}, release chan struct{}) {
	t.Helper()
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
	case <-held:
	case err := <-sent:
		close(release)
		t.Fatalf("the click was answered (%v) before its claim reached storage", err)
	}
	cancel() // Slack gives up on the request
	<-sent
}
