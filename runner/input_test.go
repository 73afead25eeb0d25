package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// bookTool is a tool whose server needs two answers first: it returns
// the questions and a state, then, sent again with the answers and the
// state, books.
type bookTool struct {
	mu    sync.Mutex
	calls []*tools.InputReply
}

func (b *bookTool) Name() string        { return "book" }
func (b *bookTool) Description() string { return "Books a room." }
func (b *bookTool) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{}}`)
}
func (b *bookTool) Idempotent(json.RawMessage) bool { return false }
func (b *bookTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	return b.CallWithInfo(ctx, tools.CallInfo{}, args)
}

func (b *bookTool) CallWithInfo(_ context.Context, info tools.CallInfo, _ json.RawMessage) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, info.Input)
	if info.Input == nil {
		schema := json.RawMessage(`{"type":"object","properties":{"v":{"type":"string"}}}`)
		return "", &tools.InputRequiredError{State: "state-1", Requests: []tools.InputRequest{
			{Key: "room", Message: "Which room?", Schema: schema}, {Key: "who", Message: "For whom?", Schema: schema}}}
	}
	in := info.Input
	return fmt.Sprintf("booked %v for %v (%s)", in.Answers["room"].Content["v"], in.Answers["who"].Content["v"], in.State), nil
}

func (b *bookTool) sent() []*tools.InputReply {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*tools.InputReply(nil), b.calls...)
}

// askRecorder is an Asker that records the questions.
type askRecorder struct {
	mu sync.Mutex
	qs []runner.Question
}

func (a *askRecorder) Ask(_ context.Context, q runner.Question) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.qs = append(a.qs, q)
	return nil
}

func (a *askRecorder) questions() []runner.Question {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]runner.Question(nil), a.qs...)
}

// bookService is a service whose one tool, book, asks for input; its
// clock says now().
func bookService(t *testing.T, w world, tool *bookTool, now func() time.Time) (*runner.Service, *askRecorder) {
	t.Helper()
	policy, err := tools.ParsePolicy([]byte("tools:\n  book: {approval: never, expires_after: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, tool)
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix})
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "book", Arguments: `{}`}} }}
	a, err := agent.New(model, reg, store, agent.Options{Graph: graph.Options{Now: now}})
	if err != nil {
		t.Fatal(err)
	}
	svc := runner.New(a, store, &recorder{}, runner.Options{LeaseTTL: time.Second, Now: now, Audit: true, Schedule: true})
	asker := &askRecorder{}
	svc.SetAsker(asker)
	return svc, asker
}

// A call whose server needs input pauses its run: the questions are
// asked of the call's requester, only they may answer, each once; the
// run resumes when every question is answered, and the call is sent
// again with the answers and the server's state.
func TestInputRequiredPausesTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	tool := &bookTool{}
	svc, asker := bookService(t, w, tool, time.Now)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "book a room"}); err != nil {
		t.Fatal(err)
	}
	res, err := svc.State(ctx, "th")
	if err != nil || res.Status() != graph.Paused {
		t.Fatalf("after the questions: %v, %v; want the run paused", res.Status(), err)
	}
	c := res.State.Calls[0]
	if c.Status != agent.Asking || c.Input == nil || c.Input.State != "state-1" || c.Input.Of != "U_ALICE" || len(c.Input.Requests) != 2 {
		t.Fatalf("the call = %+v; want it asking U_ALICE, with the server's state", c)
	}
	qs := asker.questions()
	if len(qs) != 2 || qs[0].Of != "U_ALICE" || qs[0].Round != c.Attempts || qs[0].Expires.IsZero() {
		t.Fatalf("questions = %+v; want both, of U_ALICE", qs)
	}
	answer := func(by, request, value string) error {
		return svc.Answer(ctx, runner.InputAnswer{Thread: "th", Call: c.Key, Round: c.Attempts, Request: request, By: by,
			Answer: tools.ElicitAnswer{Action: tools.ElicitAccept, Content: map[string]any{"v": value}}})
	}
	var refused *runner.RefusedError
	if err := answer("U_BOB", "who", "Bob"); !errors.As(err, &refused) {
		t.Fatalf("an answer by someone else = %v; want it refused", err)
	}
	if err := answer("U_ALICE", "nope", "x"); !errors.Is(err, runner.ErrNotPending) {
		t.Errorf("an answer to no question = %v; want ErrNotPending", err)
	}
	if err := answer("U_ALICE", "who", "Ada"); err != nil {
		t.Fatalf("answer = %v", err)
	}
	if err := answer("U_ALICE", "who", "Grace"); !errors.Is(err, runner.ErrAnswered) {
		t.Errorf("another answer to the same question = %v; want ErrAnswered", err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := len(tool.sent()); n != 1 {
		t.Fatalf("the call was sent %d times before every question was answered; want once", n)
	}
	if err := answer("U_ALICE", "room", "Lovelace"); err != nil {
		t.Fatalf("answer = %v", err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	sent := tool.sent()
	if len(sent) != 2 || sent[1] == nil || sent[1].State != "state-1" || sent[1].Answers["who"].By != "U_ALICE" {
		t.Fatalf("sends = %+v; want the second with the answers and the state", sent)
	}
	res, _ = svc.State(ctx, "th")
	if res.Status() != graph.Done || !strings.Contains(res.State.Answer(), "booked Lovelace for Ada (state-1)") {
		t.Errorf("after the answers: %v %q; want the booking", res.Status(), res.State.Answer())
	}
	if err := answer("U_ALICE", "room", "Lovelace"); !errors.Is(err, runner.ErrNotPending) {
		t.Errorf("an answer once the call went on = %v; want ErrNotPending", err)
	}
}

// A question nobody answers before its expiry: the answer is refused as
// expired, the call expires, and the model is told nobody answered.
func TestInputRequiredExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	tool := &bookTool{}
	start := time.Now()
	svc, _ := bookService(t, w, tool, func() time.Time { return start })
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "book a room"}); err != nil {
		t.Fatal(err)
	}
	later, _ := bookService(t, w, tool, func() time.Time { return start.Add(2 * time.Hour) })
	res, _ := later.State(ctx, "th")
	c := res.State.Calls[0]
	err := later.Answer(ctx, runner.InputAnswer{Thread: "th", Call: c.Key, Round: c.Attempts, Request: "who", By: "U_ALICE",
		Answer: tools.ElicitAnswer{Action: tools.ElicitAccept, Content: map[string]any{"v": "Ada"}}})
	if !errors.Is(err, runner.ErrInputExpired) {
		t.Fatalf("a late answer = %v; want ErrInputExpired", err)
	}
	if n, err := later.ExpireDue(ctx, "th"); n != 1 || err != nil {
		t.Fatalf("ExpireDue = %d, %v; want the call expired", n, err)
	}
	res, _ = later.State(ctx, "th")
	if res.Status() != graph.Done || !strings.Contains(res.State.Answer(), "did not answer") {
		t.Errorf("after the expiry: %v %q; want the model told nobody answered", res.Status(), res.State.Answer())
	}
	if n := len(tool.sent()); n != 1 {
		t.Errorf("the call was sent %d times; want once", n)
	}
}

// Declining a question settles the call: the model is told who declined,
// and the call is not sent again.
func TestInputRequiredDeclined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	tool := &bookTool{}
	svc, _ := bookService(t, w, tool, time.Now)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "book a room"}); err != nil {
		t.Fatal(err)
	}
	res, _ := svc.State(ctx, "th")
	c := res.State.Calls[0]
	for _, r := range []struct{ key, action string }{{"who", "accept"}, {"room", "decline"}} {
		err := svc.Answer(ctx, runner.InputAnswer{Thread: "th", Call: c.Key, Round: c.Attempts, Request: r.key, By: "U_ALICE",
			Answer: tools.ElicitAnswer{Action: tools.ElicitAction(r.action), Content: map[string]any{"v": "x"}}})
		if err != nil {
			t.Fatalf("answer %s = %v", r.key, err)
		}
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	res, _ = svc.State(ctx, "th")
	if !strings.Contains(res.State.Answer(), "declined the tool's request for input (\"Which room?\")") {
		t.Errorf("the model was told %q; want who declined what", res.State.Answer())
	}
	if n := len(tool.sent()); n != 1 {
		t.Errorf("the call was sent %d times; want once", n)
	}
}

// whoamiTool runs as its requester, who has no connection until
// connected is set.
type whoamiTool struct {
	bookTool
	connected bool
	sends     int
}

func (w *whoamiTool) Name() string { return "whoami" }

func (w *whoamiTool) CallWithInfo(_ context.Context, info tools.CallInfo, _ json.RawMessage) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.connected {
		return "", &tools.ConnectRequiredError{Server: "tickets", User: info.Requester, Expires: time.Now().Add(10 * time.Minute)}
	}
	w.sends++
	return "you are " + info.Requester, nil
}

// earlyConnect is whoamiTool whose requester connects as soon as they
// are asked: the callback (Connected) runs while the call's run has yet
// to save its pause, and the tool returns once the callback has read the
// thread (read).
type earlyConnect struct {
	*whoamiTool
	svc  *runner.Service
	read chan struct{}
	done chan error
}

func (e *earlyConnect) CallWithInfo(ctx context.Context, info tools.CallInfo, args json.RawMessage) (string, error) {
	out, err := e.whoamiTool.CallWithInfo(ctx, info, args)
	if err == nil {
		return out, nil
	}
	e.mu.Lock()
	e.connected = true
	e.mu.Unlock()
	for len(e.read) > 0 {
		<-e.read
	}
	conn := runner.Connection{Thread: info.Thread, Call: info.Call, Round: info.Attempt, Server: "tickets", User: info.Requester}
	go func() { e.done <- e.svc.Connected(context.WithoutCancel(ctx), conn) }()
	select {
	case <-e.read:
	case <-ctx.Done():
	}
	return out, err
}

// readSignal is a store that says when a thread was read.
type readSignal struct {
	*redisstore.Store
	read chan struct{}
}

func (r *readSignal) LoadTail(ctx context.Context, thread, id string, seq int64, from int) (*graph.Checkpoint, error) {
	cp, err := r.Store.LoadTail(ctx, thread, id, seq, from)
	r.read <- struct{}{}
	return cp, err
}

func (r *readSignal) Load(ctx context.Context, thread string) (*graph.Checkpoint, error) {
	cp, err := r.Store.Load(ctx, thread)
	r.read <- struct{}{}
	return cp, err
}

// A call that waits for its requester to connect pauses its run; the
// connection, said once or twice, sends it once; an expired wait tells
// the model nobody connected.
func TestConnectWaitIsAPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	build := func(t *testing.T, w world, tool *whoamiTool, now func() time.Time, start bool) *runner.Service {
		policy, _ := tools.ParsePolicy([]byte("tools:\n  whoami: {approval: never}\n"))
		reg, err := tools.NewRegistry(policy, tool)
		if err != nil {
			t.Fatal(err)
		}
		store := redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix})
		model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "whoami", Arguments: `{}`}} }}
		a, err := agent.New(model, reg, store, agent.Options{Graph: graph.Options{Now: now}})
		if err != nil {
			t.Fatal(err)
		}
		svc := runner.New(a, store, &recorder{}, runner.Options{LeaseTTL: time.Second, Audit: true, Schedule: true, Now: now})
		svc.SetAsker(&askRecorder{})
		if !start {
			return svc
		}
		if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "who am I"}); err != nil {
			t.Fatal(err)
		}
		return svc
	}
	t.Run("connected", func(t *testing.T) {
		tool := &whoamiTool{}
		w, _ := newWorld(t)
		svc := build(t, w, tool, time.Now, true)
		res, _ := svc.State(ctx, "th")
		c := res.State.Calls[0]
		if res.Status() != graph.Paused || c.Status != agent.Asking || c.Input.Connect != "tickets" || c.Input.Of != "U_ALICE" {
			t.Fatalf("after the prompt: %v %+v; want the run paused for U_ALICE's connection", res.Status(), c)
		}
		conn := runner.Connection{Thread: "th", Call: c.Key, Round: c.Attempts, Server: "tickets", User: "U_BOB"}
		if err := svc.Connected(ctx, conn); !errors.Is(err, runner.ErrNotPending) {
			t.Errorf("someone else's connection = %v; want ErrNotPending", err)
		}
		tool.mu.Lock()
		tool.connected = true
		tool.mu.Unlock()
		conn.User = "U_ALICE"
		for range 2 {
			if err := svc.Connected(ctx, conn); err != nil && !errors.Is(err, runner.ErrNotPending) {
				t.Fatalf("Connected = %v", err)
			}
			if err := svc.Drive(ctx, "th"); err != nil {
				t.Fatal(err)
			}
		}
		res, _ = svc.State(ctx, "th")
		if !strings.Contains(res.State.Answer(), "you are U_ALICE") || tool.sends != 1 {
			t.Errorf("after the connection: %q, %d sends; want the call run once as U_ALICE", res.State.Answer(), tool.sends)
		}
	})
	t.Run("connected before the pause is saved", func(t *testing.T) {
		// The requester connects while the run that asked them is still
		// to save its pause: the tool returns only once the callback
		// has read the thread as it stood.
		w, _ := newWorld(t)
		store := &readSignal{Store: redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix}), read: make(chan struct{}, 16)}
		tool := &earlyConnect{whoamiTool: &whoamiTool{}, read: store.read, done: make(chan error, 1)}
		policy, _ := tools.ParsePolicy([]byte("tools:\n  whoami: {approval: never}\n"))
		reg, err := tools.NewRegistry(policy, tool)
		if err != nil {
			t.Fatal(err)
		}
		model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "whoami", Arguments: `{}`}} }}
		a, err := agent.New(model, reg, store, agent.Options{})
		if err != nil {
			t.Fatal(err)
		}
		svc := runner.New(a, store, &recorder{}, runner.Options{LeaseTTL: 5 * time.Second, Audit: true, Schedule: true})
		svc.SetAsker(&askRecorder{})
		tool.svc = svc
		if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "who am I"}); err != nil {
			t.Fatal(err)
		}
		if err := <-tool.done; err != nil {
			t.Fatalf("Connected before the pause was saved = %v; want the call resumed", err)
		}
		if err := svc.Drive(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		res, _ := svc.State(ctx, "th")
		if !strings.Contains(res.State.Answer(), "you are U_ALICE") || tool.sends != 1 {
			t.Errorf("after the early connection: %q, %d sends; want the call run once as U_ALICE", res.State.Answer(), tool.sends)
		}
	})
	t.Run("expired", func(t *testing.T) {
		tool := &whoamiTool{}
		w, _ := newWorld(t)
		build(t, w, tool, time.Now, true)
		later := build(t, w, tool, func() time.Time { return time.Now().Add(time.Hour) }, false)
		if n, err := later.ExpireDue(ctx, "th"); n != 1 || err != nil {
			t.Fatalf("ExpireDue = %d, %v; want the wait expired", n, err)
		}
		res, _ := later.State(ctx, "th")
		if !strings.Contains(res.State.Answer(), "did not connect to the MCP server \"tickets\"") || tool.sends != 0 {
			t.Errorf("after the expiry: %q, %d sends; want the model told, nothing sent", res.State.Answer(), tool.sends)
		}
	})
}
