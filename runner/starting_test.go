package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
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

// lapsingModel answers "ok" to every request, but on the first one it
// ends the thread's lease (end), as a stall past it would, and waits for
// the run to be stopped for that.
type lapsingModel struct {
	once sync.Once
	end  func()
}

func (m *lapsingModel) Name() string { return "lapsing" }

func (m *lapsingModel) Generate(ctx context.Context, msgs []llm.Message, _ []llm.ToolDef) (llm.Message, error) {
	first := false
	m.once.Do(func() { first = true })
	if first {
		m.end()
		<-ctx.Done()
		return llm.Message{}, ctx.Err()
	}
	return llm.Message{Role: llm.RoleAssistant, Content: "ok: " + msgs[len(msgs)-1].Content}, nil
}

// TestStartThatLostItsLeaseBeforeSavingIsStartedAgain: a conversation's
// first run loses the thread's lease before its first save, and is
// stopped when a renewal finds it gone. Nobody carries that run on: Start
// says the lease was lost (not "the holder carries it on", nor "the
// thread exists"), so the caller starts it again, and the second start
// runs the request once.
func TestStartThatLostItsLeaseBeforeSavingIsStartedAgain(t *testing.T) {
	ctx := context.Background()
	w, _ := newWorld(t)
	model := &lapsingModel{end: func() {
		if n, err := w.rdb.Del(context.Background(), leaseKey(w, "th")).Result(); err != nil || n != 1 {
			t.Errorf("ending the lease of the starting run: %d keys, %v; want it held", n, err)
		}
	}}
	w.model = model
	svc, _ := w.service(t, nil, 1500*time.Millisecond)
	req := runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello"}
	if err := svc.Start(ctx, req); !errors.Is(err, runner.ErrLeaseLost) {
		t.Fatalf("Start() that lost its lease before saving = %v, want ErrLeaseLost", err)
	}
	if _, err := svc.State(ctx, "th"); !errors.Is(err, runner.ErrNoThread) {
		t.Fatalf("State() after the lost start = %v, want ErrNoThread: the test does not test anything", err)
	}
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
}
