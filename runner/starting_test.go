package runner_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// heldModel answers "ok" to every request, but holds the first one until
// released.
type heldModel struct {
	once     sync.Once
	arrived  chan struct{}
	released chan struct{}
}

func (m *heldModel) Name() string { return "held" }

func (m *heldModel) Generate(ctx context.Context, msgs []llm.Message, _ []llm.ToolDef) (llm.Message, error) {
	first := false
	m.once.Do(func() { first = true })
	if first {
		close(m.arrived)
		select {
		case <-m.released:
		case <-ctx.Done():
			return llm.Message{}, ctx.Err()
		}
	}
	return llm.Message{Role: llm.RoleAssistant, Content: "ok: " + msgs[len(msgs)-1].Content}, nil
}

// TestReplyWhileTheConversationStarts: a conversation's first checkpoint
// is written with its first answer, so a reply typed while the first run
// works finds no checkpoint. It is not "a thread that is not a
// conversation": it waits for the run that holds the thread and becomes
// the next turn.
func TestReplyWhileTheConversationStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	model := &heldModel{arrived: make(chan struct{}), released: make(chan struct{})}
	w.model = model
	svc, _ := w.service(t, nil, 5*time.Second)
	started := make(chan error, 1)
	go func() {
		started <- svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello"})
	}()
	<-model.arrived
	if _, err := svc.State(ctx, "th"); err == nil {
		t.Fatal("the thread has a checkpoint while its first model call works: the test does not test anything")
	}
	replied := make(chan error, 1)
	go func() { replied <- svc.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: and more"}) }()
	close(model.released)
	if err := <-started; err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if err := <-replied; err != nil {
		t.Fatalf("Reply() while the conversation started = %v, want it carried into the next turn", err)
	}
	res, err := svc.State(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status() != graph.Done || res.State.Answer() != "ok: chat: and more" {
		t.Errorf("after the reply: status %v, answer %q; want the reply answered", res.Status(), res.State.Answer())
	}
}

// takingModel answers "ok" to every request, but on the first one it
// calls take first: another acquisition takes the thread's lease while
// the model works.
type takingModel struct {
	once sync.Once
	take func()
}

func (m *takingModel) Name() string { return "taking" }

func (m *takingModel) Generate(_ context.Context, msgs []llm.Message, _ []llm.ToolDef) (llm.Message, error) {
	m.once.Do(m.take)
	return llm.Message{Role: llm.RoleAssistant, Content: "ok: " + msgs[len(msgs)-1].Content}, nil
}

// TestStartThatLostItsLeaseBeforeSavingIsStartedAgain: a conversation's
// first run takes the thread's lease with its first save; while its
// model works, another acquisition takes the lease (a stalled process's
// start, a look at the thread). The first save is refused and writes
// nothing, and nobody carries that run on: Start says the lease was lost
// (not "the holder carries it on", nor "the thread exists"), so the
// caller starts it again, and the second start runs the request once.
func TestStartThatLostItsLeaseBeforeSavingIsStartedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	rep := &recorder{}
	model := &takingModel{take: func() {
		if ok, err := w.rdb.SetNX(context.Background(), leaseKey(w, "th"), "elsewhere:1", time.Minute).Result(); err != nil || !ok {
			t.Errorf("taking the lease while the start's model works: %v, %v; want it free", ok, err)
		}
	}}
	w.model = model
	svc, _ := w.service(t, rep, 1500*time.Millisecond)
	req := runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello"}
	if err := svc.Start(ctx, req); !errors.Is(err, runner.ErrLeaseLost) {
		t.Fatalf("Start() whose first save found the lease held = %v, want ErrLeaseLost", err)
	}
	if _, err := svc.State(ctx, "th"); !errors.Is(err, runner.ErrNoThread) {
		t.Fatalf("State() after the lost start = %v, want ErrNoThread: the first save wrote something", err)
	}
	if got := rep.answers(); len(got) != 0 {
		t.Fatalf("answers shown by the start that saved nothing: %q", got)
	}
	if v, err := w.rdb.Get(ctx, leaseKey(w, "th")).Result(); err != nil || v != "elsewhere:1" {
		t.Fatalf("the other acquisition's lease after the refused save: %q, %v; want it left alone", v, err)
	}
	// That acquisition ends; the request is started again.
	endLease(t, w, "th")
	if err := svc.Start(ctx, req); err != nil {
		t.Fatalf("Start() again = %v", err)
	}
	res, err := svc.State(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	for _, m := range res.State.Messages {
		if m.Role == llm.RoleUser && m.Content == "chat: hello" {
			asked++
		}
	}
	if res.Status() != graph.Done || res.State.Answer() != "ok: chat: hello" || asked != 1 {
		t.Errorf("after starting again: status %v, answer %q, request %d times; want it answered once", res.Status(), res.State.Answer(), asked)
	}
	if got := rep.answers(); len(got) != 1 {
		t.Errorf("answers shown: %q, want the one of the second start", got)
	}
	if n, err := w.rdb.Exists(ctx, leaseKey(w, "th")).Result(); err != nil || n != 0 {
		t.Errorf("the lease after the start answered: %d keys, %v; want it let go", n, err)
	}
}

// meetingModel is a model whose first two requests wait for each other:
// two starts of one thread ask it at once.
type meetingModel struct {
	llm.Model
	n    atomic.Int32
	both chan struct{}
}

func (m *meetingModel) Generate(ctx context.Context, msgs []llm.Message, defs []llm.ToolDef) (llm.Message, error) {
	if m.n.Add(1) == 2 {
		close(m.both)
	}
	select {
	case <-m.both:
	case <-ctx.Done():
		return llm.Message{}, ctx.Err()
	}
	return m.Model.Generate(ctx, msgs, defs)
}

// TestTwoStartsOfOneThreadMakeOneConversation: a request is started by
// two replicas at once (the intake's attempt of one, taken for lapsed by
// the other). Neither holds the thread while its model works: both ask
// the model, and both runs reach their first save, a save of the lookup
// as running. One creates the thread and takes its lease; the other's is
// refused and writes nothing. The lookup runs once, each card is shown
// once, and the start that lost says the thread exists.
func TestTwoStartsOfOneThreadMakeOneConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	model := &meetingModel{Model: &agenttest.Planner{Plan: plan(w.base)}, both: make(chan struct{})}
	w.model = model
	reps := []*recorder{{}, {}}
	errs := make(chan error, 2)
	for _, rep := range reps {
		svc, _ := w.service(t, rep, processLease)
		go func() {
			errs <- svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"})
		}()
	}
	won, exists := 0, 0
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			won++
		case errors.Is(err, runner.ErrThreadExists):
			exists++
		default:
			t.Errorf("Start() beside another start = %v", err)
		}
	}
	if won != 1 || exists != 1 {
		t.Fatalf("starts: %d started, %d found the thread; want one each", won, exists)
	}
	if n := model.n.Load(); n < 2 {
		t.Fatalf("the model was asked %d times: the starts did not race", n)
	}
	if n := tg.Count("GET /lookup"); n != 1 {
		t.Errorf("lookup ran %d times, want once", n)
	}
	for _, tool := range []string{"deploy", "delete"} {
		if n := reps[0].cards(tool) + reps[1].cards(tool); n != 1 {
			t.Errorf("%s's card was shown %d times, want once", tool, n)
		}
	}
	svc, _ := w.service(t, nil, processLease)
	res, err := svc.State(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	for _, m := range res.State.Messages {
		if m.Role == llm.RoleUser && m.Content == "ship" {
			asked++
		}
	}
	if res.Status() != graph.Paused || res.State.NumWaiting() != 2 || asked != 1 {
		t.Errorf("the thread: status %v, %d waiting, request %d times; want one conversation paused on two calls", res.Status(), res.State.NumWaiting(), asked)
	}
	if n, err := w.rdb.Exists(ctx, leaseKey(w, "th")).Result(); err != nil || n != 0 {
		t.Errorf("the lease after both starts: %d keys, %v; want it let go", n, err)
	}
}

// echoModel answers "ok: " and the last message to every request.
type echoModel struct{}

func (echoModel) Name() string { return "echo" }

func (echoModel) Generate(_ context.Context, msgs []llm.Message, _ []llm.ToolDef) (llm.Message, error) {
	return llm.Message{Role: llm.RoleAssistant, Content: "ok: " + msgs[len(msgs)-1].Content}, nil
}

// userMessages lists the people's messages of the thread's conversation.
func userMessages(t *testing.T, svc *runner.Service, thread string) []string {
	t.Helper()
	res, err := svc.State(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range res.State.Messages {
		if m.Role == llm.RoleUser {
			out = append(out, m.Content)
		}
	}
	return out
}

// TestRepliesBeforeAMentionAreNotItsConversation: people talk in a
// thread, then mention the bot in it. The replies before the mention
// found no conversation and were kept for a start's first save; the
// start of the mention takes only those that came after it.
func TestRepliesBeforeAMentionAreNotItsConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	w.model = echoModel{}
	svc, _ := w.service(t, nil, processLease)
	m := runner.Message{Thread: "th", By: "U_BOB", Text: "chat: lunch?", TS: "1700000000.000100"}
	if err := svc.Reply(ctx, m); err != nil && !errors.Is(err, runner.ErrNoThread) {
		t.Fatalf("Reply() in a thread that is no conversation = %v", err)
	}
	// A reply typed after the mention, before its first save.
	after := runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: and more", TS: "1700000000.000300"}
	if err := svc.Reply(ctx, after); err != nil {
		t.Fatalf("Reply() after the mention, before its first save = %v", err)
	}
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello", TS: "1700000000.000200"}); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if got, want := userMessages(t, svc, "th"), []string{"chat: hello", "chat: and more"}; !slices.Equal(got, want) {
		t.Errorf("the conversation's messages = %q, want %q", got, want)
	}
}

// TestReplyKeptForAStartThatSavedNothingReachesTheNext: a reply is kept
// while a start's model works; that start's first save is refused
// (another acquisition held the lease) and writes nothing, so it hands
// over nothing either. The start that runs the request again takes the
// reply, once.
func TestReplyKeptForAStartThatSavedNothingReachesTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	var svc *runner.Service
	w.model = &takingModel{take: func() {
		if err := svc.Reply(context.Background(), runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: and more"}); err != nil {
			t.Errorf("Reply() while the start's model works = %v", err)
		}
		if ok, err := w.rdb.SetNX(context.Background(), leaseKey(w, "th"), "elsewhere:1", time.Minute).Result(); err != nil || !ok {
			t.Errorf("taking the lease while the start's model works: %v, %v; want it free", ok, err)
		}
	}}
	svc, _ = w.service(t, nil, processLease)
	req := runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello"}
	if err := svc.Start(ctx, req); !errors.Is(err, runner.ErrLeaseLost) {
		t.Fatalf("Start() whose first save found the lease held = %v, want ErrLeaseLost", err)
	}
	endLease(t, w, "th")
	if err := svc.Start(ctx, req); err != nil {
		t.Fatalf("Start() again = %v", err)
	}
	if got, want := userMessages(t, svc, "th"), []string{"chat: hello", "chat: and more"}; !slices.Equal(got, want) {
		t.Errorf("the conversation's messages = %q, want %q", got, want)
	}
	res, err := svc.State(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status() != graph.Done || res.State.Answer() != "ok: chat: and more" {
		t.Errorf("after the start: status %v, answer %q; want the reply answered", res.Status(), res.State.Answer())
	}
}

// TestReplyAfterTheFirstSaveIsNotKept: a reply that comes once the first
// save is made finds the thread's head and is handled as any reply (here
// a new turn), not kept for a first save that has been made.
func TestReplyAfterTheFirstSaveIsNotKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	w.model = echoModel{}
	svc, _ := w.service(t, nil, processLease)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello"}); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if err := svc.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: and more"}); err != nil {
		t.Fatalf("Reply() = %v", err)
	}
	if got, want := userMessages(t, svc, "th"), []string{"chat: hello", "chat: and more"}; !slices.Equal(got, want) {
		t.Errorf("the conversation's messages = %q, want %q", got, want)
	}
	if n, err := w.rdb.Exists(ctx, w.prefix+":{th}:kept").Result(); err != nil || n != 0 {
		t.Errorf("kept replies of a started thread: %d keys, %v; want none", n, err)
	}
}

// TestKilledAfterItsFirstSaveIsLookedAtAgain: a replica starts a
// conversation; its first save, the lookup's running save, takes the
// thread's lease without ending the session, and the replica dies right
// after it. The save set the thread's wake-up, as taking the lease
// before the run did: once the lease is over, the schedule's tick of the
// thread carries the run on (the lookup runs once) to its cards.
func TestKilledAfterItsFirstSaveIsLookedAtAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	w.schedule = true
	started := time.Now()
	victim := startReplica(t, w, "drive", "CHILD_THREAD=th", "CHILD_USER=U_BOB", "CHILD_KILL_AFTER=1", "CHILD_SCHEDULE=1")
	if l := victim.line(t); l != "SAVED 1" {
		t.Fatalf("victim said %q, want SAVED 1 (a first save that keeps the lease)", l)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	heldOff(t, w, "th")
	score, err := w.rdb.ZScore(ctx, w.prefix+":wakeups", "th").Result()
	if err != nil {
		t.Fatalf("the thread has no wake-up after its first save: %v", err)
	}
	if at := time.UnixMilli(int64(score)); at.After(time.Now().Add(2 * processLease)) {
		t.Fatalf("the thread wakes at %v, %v after the start; want within two leases", at, at.Sub(started))
	}
	endLease(t, w, "th")
	rep := &recorder{}
	heir, _ := w.service(t, rep, processLease)
	if err := heir.Tick(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("GET /lookup"); n != 1 {
		t.Errorf("lookup ran %d times, want once", n)
	}
	if n, m := rep.cards("deploy"), rep.cards("delete"); n != 1 || m != 1 {
		t.Errorf("the replica woken showed %d deploy and %d delete cards, want one each", n, m)
	}
}

// TestReplyWhileAStreamedConversationStarts: a front end that streams
// answers shows them before they are saved, so its start takes the
// thread's lease before the model is asked, as before. A reply typed
// meanwhile finds no checkpoint and the lease held: it is not kept for
// a first save, it waits for the lease and becomes the next turn.
func TestReplyWhileAStreamedConversationStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	w.stream = true
	model := &heldModel{arrived: make(chan struct{}), released: make(chan struct{})}
	w.model = model
	kept := make(chan runner.Kept, 1)
	w.leases = func(s *redisstore.Store) runner.Store { return keepSpy{s, kept} }
	svc, _ := w.service(t, nil, 5*time.Second)
	started := make(chan error, 1)
	go func() {
		started <- svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello"})
	}()
	<-model.arrived
	if n, err := w.rdb.Exists(ctx, leaseKey(w, "th")).Result(); err != nil || n != 1 {
		t.Fatalf("the lease while a streamed start's model works: %d keys, %v; want it held", n, err)
	}
	replied := make(chan error, 1)
	go func() { replied <- svc.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: and more"}) }()
	if k := <-kept; k != runner.KeptNot {
		t.Errorf("KeepReply() while a streamed start holds the lease = %v, want KeptNot", k)
	}
	close(model.released)
	if err := <-started; err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if err := <-replied; err != nil {
		t.Fatalf("Reply() while the conversation started = %v, want it carried into the next turn", err)
	}
	if got, want := userMessages(t, svc, "th"), []string{"chat: hello", "chat: and more"}; !slices.Equal(got, want) {
		t.Errorf("the conversation's messages = %q, want %q", got, want)
	}
	if n, err := w.rdb.Exists(ctx, w.prefix+":{th}:kept").Result(); err != nil || n != 0 {
		t.Errorf("kept replies of a streamed start: %d keys, %v; want none", n, err)
	}
}

// keepSpy tells kept what each KeepReply did.
type keepSpy struct {
	*redisstore.Store
	kept chan<- runner.Kept
}

func (k keepSpy) KeepReply(ctx context.Context, thread string, reply []byte, ttl time.Duration) (runner.Kept, error) {
	got, err := k.Store.KeepReply(ctx, thread, reply, ttl)
	if err == nil {
		k.kept <- got
	}
	return got, err
}

// modelFunc is a model that calls asked and answers nothing.
type modelFunc func()

func (modelFunc) Name() string { return "func" }

func (f modelFunc) Generate(context.Context, []llm.Message, []llm.ToolDef) (llm.Message, error) {
	f()
	return llm.Message{}, errors.New("no answer")
}

// TestKilledBeforeItsFirstSave: a replica starts a conversation and is
// killed while its model works. It held no lease and saved nothing: the
// thread has no checkpoint, no lease and no wake-up, so nobody is held
// off it, and the request (kept due by the intake) started again by
// another replica runs once.
func TestKilledBeforeItsFirstSave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	w.schedule = true
	victim := startReplica(t, w, "ask-then-die", "CHILD_THREAD=th", "CHILD_SCHEDULE=1")
	if l := victim.line(t); l != "ASKED" {
		t.Fatalf("victim said %q, want ASKED", l)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	n, err := w.rdb.Exists(ctx, leaseKey(w, "th"), w.prefix+":{th}:history", w.prefix+":{th}:claims").Result()
	if err != nil || n != 0 {
		t.Fatalf("keys of the thread after a start killed before its first save: %d, %v; want none", n, err)
	}
	if _, err := w.rdb.ZScore(ctx, w.prefix+":wakeups", "th").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("the thread's wake-up after a start killed before its first save: %v; want none", err)
	}
	rep := &recorder{}
	heir, _ := w.service(t, rep, processLease)
	if err := heir.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatalf("Start() again = %v", err)
	}
	if n := tg.Count("GET /lookup"); n != 1 {
		t.Errorf("lookup ran %d times, want once", n)
	}
	if n, m := rep.cards("deploy"), rep.cards("delete"); n != 1 || m != 1 {
		t.Errorf("the start again showed %d deploy and %d delete cards, want one each", n, m)
	}
}

// TestKeptRepliesGoToTheFrontEndsCarrier: a front end that keeps each
// reply's request durably sets a KeptCarrier. A reply kept for the first
// save is then not settled (ErrKept: its front end keeps its request
// due), and the start does not apply it itself: it gives the carrier the
// replies its first save handed over, with what identifies their
// requests, leaving out those written before the request and repeats of
// one request. The carrier's Reply applies each, once.
func TestKeptRepliesGoToTheFrontEndsCarrier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	model := &heldModel{arrived: make(chan struct{}), released: make(chan struct{})}
	w.model = model
	svc, _ := w.service(t, nil, 5*time.Second)
	carried := make(chan []runner.Message, 1)
	svc.SetKeptCarrier(func(_ context.Context, replies []runner.Message) { carried <- replies })
	started := make(chan error, 1)
	go func() {
		started <- svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello", TS: "1700000000.000200"})
	}()
	<-model.arrived
	before := runner.Message{Thread: "th", By: "U_BOB", Text: "chat: lunch?", TS: "1700000000.000100", Ref: "r0"}
	after := runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: and more", TS: "1700000000.000300", Ref: "r1"}
	for _, m := range []runner.Message{before, after, after} { // after twice: looked at again
		if err := svc.Reply(ctx, m); !errors.Is(err, runner.ErrKept) {
			t.Fatalf("Reply(%q) before the first save = %v, want ErrKept", m.Text, err)
		}
	}
	close(model.released)
	if err := <-started; err != nil {
		t.Fatalf("Start() = %v", err)
	}
	got := <-carried
	if len(got) != 1 || got[0].Ref != "r1" || got[0].Text != "chat: and more" || !got[0].Kept {
		t.Fatalf("the carrier was given %+v, want the reply after the request, once, kept", got)
	}
	if got, want := userMessages(t, svc, "th"), []string{"chat: hello"}; !slices.Equal(got, want) {
		t.Fatalf("the conversation's messages before the carrier = %q, want %q: the start applied a kept reply itself", got, want)
	}
	if err := svc.Reply(ctx, got[0]); err != nil {
		t.Fatalf("the carrier's Reply() = %v", err)
	}
	if got, want := userMessages(t, svc, "th"), []string{"chat: hello", "chat: and more"}; !slices.Equal(got, want) {
		t.Errorf("the conversation's messages = %q, want %q", got, want)
	}
}

// TestKeptReplyWaitsForAWorkingRunAsForAnAnsweredOne: a reply kept while
// a conversation started is carried on once the first save is made; it
// may find the run still working (here a lookup that needs no approval
// and does not answer). It waits for the run's lease as long as a reply
// to an answered run does — a lease and BusyWait, on the service's clock
// — before it is called busy; a reply that was not kept waits BusyWait.
func TestKeptReplyWaitsForAWorkingRunAsForAnAnsweredOne(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	w, tg := newWorld(t)
	tg.HoldNext("GET /lookup")
	starter, _ := w.service(t, nil, processLease)
	started := make(chan error, 1)
	go func() {
		started <- starter.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"})
	}()
	t.Cleanup(func() { cancel(); <-started })
	<-tg.Arrived // the lookup's running save, the first, is made

	const step = 100 * time.Millisecond
	w.busyWait = step
	for _, kept := range []bool{false, true} {
		var ticks atomic.Int64
		at := time.Now()
		clock := func() time.Time { return at.Add(time.Duration(ticks.Add(1)) * step) }
		svc, _ := w.build(t, nil, processLease, clock)
		err := svc.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: and more", Kept: kept})
		if !errors.Is(err, runner.ErrBusy) {
			t.Fatalf("Reply(kept %v) to a working run = %v, want ErrBusy", kept, err)
		}
		waited := time.Duration(ticks.Load()) * step
		switch {
		case kept && waited < processLease+step:
			t.Errorf("a kept reply waited %v for the working run, want a lease and BusyWait (%v)", waited, processLease+step)
		case !kept && waited >= processLease:
			t.Errorf("a reply that was not kept waited %v for the working run, want about BusyWait (%v)", waited, step)
		}
	}
}
