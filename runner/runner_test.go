package runner_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

func newWorld(t *testing.T) (world, *target) {
	tg := newTarget(t)
	return world{rdb: redistest.Client(t), prefix: "runner-test-" + randomHex(), base: tg.URL}, tg
}

func TestFullConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	model := &countingModel{Model: &agenttest.Planner{Plan: plan(w.base)}}
	w.model = model
	rep := &recorder{}
	svc, _ := w.service(t, rep, time.Second)

	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	asked := model.asked.Load()
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); !errors.Is(err, runner.ErrThreadExists) {
		t.Errorf("Start(again) = %v, want ErrThreadExists", err)
	}
	if n := model.asked.Load() - asked; n != 0 {
		t.Errorf("Start(again) asked the model %d more times; want none: the conversation exists", n)
	}
	want := []string{"call_started lookup", "call_finished lookup", "approval_needed deploy", "approval_needed delete"}
	if got := rep.kinds(); !slices.Equal(got, want) {
		t.Fatalf("events after Start = %v, want %v", got, want)
	}
	if _, err := finish(ctx, svc, "th", "U_BOB", agent.Approve, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := []int{tg.Count("GET /lookup"), tg.Count("POST /deploy"), tg.Count("POST /delete")}; !slices.Equal(got, []int{1, 1, 0}) {
		t.Errorf("executions lookup/deploy/delete = %v, want [1 1 0]", got)
	}
	answers := rep.answers()
	if len(answers) != 1 || !strings.Contains(answers[0], "delete → Rejected by user U_BOB: not today") ||
		!strings.Contains(answers[0], "deploy → HTTP 200 OK") {
		t.Errorf("answers = %q, want one with every result", answers)
	}

	// A reply after the run: a new turn that sees the conversation.
	if err := svc.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: thanks"}); err != nil {
		t.Fatalf("Reply() = %v", err)
	}
	res, err := svc.State(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if res.State.Answer() != "You said: chat: thanks" || len(res.State.Messages) != 8 {
		t.Errorf("after reply: %d messages, answer %q; want 8 and the reply answered", len(res.State.Messages), res.State.Answer())
	}
}

func TestConcurrentDecisionsOneWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	svc, _ := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	deploy := waitingCall(t, svc, "th", "deploy")

	// Ten replicas, each a service of its own, click Approve at once.
	const n = 10
	var start, done sync.WaitGroup
	start.Add(1)
	errs := make([]error, n)
	for i := range n {
		replica, _ := w.service(t, nil, time.Second)
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			errs[i] = replica.Decide(ctx, decision("th", deploy, agent.Approve, "U"+string(rune('A'+i))))
			if errs[i] == nil {
				errs[i] = replica.Drive(ctx, "th")
			}
		}()
	}
	start.Done()
	done.Wait()
	won := 0
	var winner string
	for i, err := range errs {
		var lost *runner.AlreadyDecidedError
		switch {
		case err == nil:
			won++
			winner = "U" + string(rune('A'+i))
		case errors.As(err, &lost):
		default:
			t.Errorf("Decide() = %v, want nil or an already-decided error", err)
		}
	}
	for _, err := range errs {
		var lost *runner.AlreadyDecidedError
		if errors.As(err, &lost) && lost.Decision.By != winner {
			t.Errorf("loser told %q decided, but %q won", lost.Decision.By, winner)
		}
	}
	if won != 1 || tg.Count("POST /deploy") != 1 {
		t.Errorf("%d decisions won and deploy ran %d times, want 1 and 1", won, tg.Count("POST /deploy"))
	}
	res, _ := svc.State(ctx, "th")
	if w := res.State.Waiting(); res.Status() != graph.Paused || len(w) != 1 || w[0].Tool != "delete" {
		t.Errorf("after the race: %s, waiting %v; want paused on delete only", res.Status(), w)
	}
}

func TestReplyWhilePausedIsFeedback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	svc, _ := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "wait, use staging"}); err != nil {
		t.Fatalf("Reply() = %v", err)
	}
	res, _ := svc.State(ctx, "th")
	if res.Status() != graph.Done || !strings.Contains(res.State.Answer(), "deploy → Rejected by user U_ALICE: wait, use staging") {
		t.Errorf("after feedback: %s %q; want done with the feedback as the reason", res.Status(), res.State.Answer())
	}
	if tg.Count("POST /deploy")+tg.Count("POST /delete") != 0 {
		t.Error("calls answered with feedback ran")
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	svc, _ := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	if n, err := svc.ExpireDue(ctx, "th"); n != 0 || err != nil {
		t.Errorf("ExpireDue(before the deadline) = %d, %v; want 0, nil", n, err)
	}
	later := w
	rep := &recorder{}
	future, _ := later.serviceAt(t, rep, time.Now().Add(25*time.Hour))
	if n, err := future.ExpireDue(ctx, "th"); n != 2 || err != nil {
		t.Fatalf("ExpireDue(after) = %d, %v; want 2, nil", n, err)
	}
	res, _ := svc.State(ctx, "th")
	if res.Status() != graph.Done || strings.Count(res.State.Answer(), "expired before anyone decided") != 2 {
		t.Errorf("after expiry: %s %q", res.Status(), res.State.Answer())
	}
	var lost *runner.AlreadyDecidedError
	if err := svc.Decide(ctx, runner.Decision{Thread: "th", Call: "0.1", Kind: agent.Approve, By: "U_BOB"}); !errors.As(err, &lost) || lost.Decision.Kind != agent.Expire {
		t.Errorf("Decide(after expiry) = %v, want that the call expired (it is settled)", err)
	}
}

func TestModelFailureIsSavedAndRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	model := llmtest.NewScripted().
		ThenError(llm.ErrUnavailable).
		Then(llm.Message{Role: llm.RoleAssistant, Content: "back again"})
	w.model = model
	rep := &recorder{}
	svc, _ := w.service(t, rep, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	res, _ := svc.State(ctx, "th")
	if res.Status() != graph.Failed || !slices.Contains(rep.kinds(), "run_failed") {
		t.Fatalf("after the model failed: %s, events %v; want failed and reported", res.Status(), rep.kinds())
	}
	if err := svc.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "hello?"}); !errors.Is(err, runner.ErrFailed) {
		t.Errorf("Reply(failed run) = %v, want ErrFailed", err)
	}
	if err := svc.Retry(ctx, runner.Message{Thread: "th", By: "U_ALICE"}); err != nil {
		t.Fatalf("Retry() = %v", err)
	}
	res, _ = svc.State(ctx, "th")
	if res.Status() != graph.Done || res.State.Answer() != "back again" || len(res.State.Messages) != 2 {
		t.Errorf("after Retry: %s %q (%d messages); want done, answered once", res.Status(), res.State.Answer(), len(res.State.Messages))
	}
	if err := svc.Retry(ctx, runner.Message{Thread: "th", By: "U_ALICE"}); !errors.Is(err, runner.ErrNotFailed) {
		t.Errorf("Retry(done) = %v, want ErrNotFailed", err)
	}
}

// A decision claimed while Start still holds the thread (between a card
// being posted and the lease being let go) is applied at once, not when
// the lease would have lapsed.
func TestDecisionDuringStartIsNotStranded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	var svc *runner.Service
	rep := runner.ReporterFunc(func(ctx context.Context, e runner.Event) error {
		// Decide the instant the card would be posted, from "another
		// replica": the lease is still held by Start.
		if e.Kind == runner.ApprovalNeeded && e.Call.Tool == "deploy" {
			replica, _ := w.service(t, nil, time.Minute)
			if err := replica.Decide(ctx, decision(e.Thread, *e.Call, agent.Approve, "U_BOB")); err != nil {
				t.Errorf("Decide() = %v", err)
			}
			if err := replica.Drive(ctx, e.Thread); err != nil {
				t.Errorf("Drive() = %v", err)
			}
		}
		return nil
	})
	svc, _ = w.service(t, rep, time.Minute)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times by the time Start returned, want 1", n)
	}
}

// Decide is what a front end calls before acknowledging a click: it must
// not wait on the front end. Drive then reports the decision, once,
// before the call runs.
func TestDecideShowsNothingDriveReportsTheDecision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	rep := &recorder{}
	svc, _ := w.service(t, rep, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	deploy := waitingCall(t, svc, "th", "deploy")
	before := len(rep.kinds())
	if err := svc.Decide(ctx, decision("th", deploy, agent.Approve, "U_BOB")); err != nil {
		t.Fatal(err)
	}
	if got := rep.kinds()[before:]; len(got) != 0 {
		t.Errorf("Decide reported %v; it must leave showing to Drive", got)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	want := []string{"call_decided deploy", "call_started deploy", "call_finished deploy"}
	if got := rep.kinds()[before:]; !slices.Equal(got, want) {
		t.Errorf("Drive reported %v, want %v", got, want)
	}
}

// A reply that arrives while the run that just answered still holds the
// thread waits for it instead of being refused.
func TestReplyWaitsForTheThreadToBeFree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	svc, store := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello"}); err != nil {
		t.Fatal(err)
	}
	// Another process holds the thread for a moment.
	token, err := store.AcquireLease(ctx, "th", "other-process", time.Minute)
	if token == "" || err != nil {
		t.Fatalf("AcquireLease() = %q, %v", token, err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = store.ReleaseLease(ctx, "th", token)
	}()
	if err := svc.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: still there?"}); err != nil {
		t.Fatalf("Reply() = %v, want it to wait for the thread", err)
	}
	res, _ := svc.State(ctx, "th")
	if res.State.Answer() != "You said: chat: still there?" {
		t.Errorf("answer = %q", res.State.Answer())
	}
}

// A reply to a thread whose run has answered waits for the lease longer
// than BusyWait — as long as a lease lasts: its holder is only showing
// the answer and letting go (on a busy machine that can take a while),
// or died and loses it. It is not refused as busy.
func TestReplyToAnAnsweredThreadWaitsALease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	w.busyWait = 50 * time.Millisecond
	// A long lease: the reply may wait that long for the release below,
	// however slow the machine.
	svc, store := w.service(t, nil, 30*time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello"}); err != nil {
		t.Fatal(err)
	}
	token, err := store.AcquireLease(ctx, "th", "answering-process", 30*time.Second)
	if token == "" || err != nil {
		t.Fatalf("AcquireLease() = %q, %v", token, err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond) // well past BusyWait
		_ = store.ReleaseLease(ctx, "th", token)
	}()
	if err := svc.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: still there?"}); err != nil {
		t.Fatalf("Reply() = %v, want it to wait for the lease", err)
	}
	res, _ := svc.State(ctx, "th")
	if res.State.Answer() != "You said: chat: still there?" {
		t.Errorf("answer = %q", res.State.Answer())
	}
}

// countingModel counts the requests its model is asked.
type countingModel struct {
	llm.Model
	asked atomic.Int32
}

func (m *countingModel) Generate(ctx context.Context, msgs []llm.Message, defs []llm.ToolDef) (llm.Message, error) {
	m.asked.Add(1)
	return m.Model.Generate(ctx, msgs, defs)
}
