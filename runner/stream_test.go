package runner_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// streamingService is a service whose agent streams through OnStream,
// asking the OpenAI fake.
func streamingService(t *testing.T, srv *llmtest.OpenAIServer, rep runner.Reporter) *runner.Service {
	t.Helper()
	policy, err := tools.ParsePolicy([]byte("tools:\n  lookup: {approval: never}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, named{tools.NewHTTPRequest(tools.HTTPOptions{}), "lookup"})
	if err != nil {
		t.Fatal(err)
	}
	model, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: srv.URL(), Model: "gpt-test"})
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: "runner-stream-" + randomHex()})
	a, err := agent.New(model, reg, store, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return runner.New(a, store, rep, runner.Options{LeaseTTL: time.Second, Stream: true})
}

// TestAnswerStreams: the front end sees the model think, the answer grow
// word by word, and the Answer once, all for the same message.
func TestAnswerStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("It is sunny in Oslo."))
	rep := &recorder{}
	svc := streamingService(t, srv, rep)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "weather?"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	rep.mu.Lock()
	for _, e := range rep.events {
		got = append(got, fmt.Sprintf("%s %d %q", e.Kind, e.Message, e.Text))
	}
	rep.mu.Unlock()
	want := []string{
		`thinking 1 ""`,
		`answer_delta 1 "It "`,
		`answer_delta 1 "It is "`,
		`answer_delta 1 "It is sunny "`,
		`answer_delta 1 "It is sunny in "`,
		`answer_delta 1 "It is sunny in Oslo."`,
		`answer 1 "It is sunny in Oslo."`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

// TestStreamEndsBeforeCalls: a reply that asks for tool calls ends its
// stream with StreamEnded, and the answer after the calls streams as
// message 3.
func TestStreamEndsBeforeCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tg := newTarget(t)
	srv := llmtest.NewOpenAIServer(t,
		llmtest.Reply("Looking it up.", llmtest.Call("c1", "lookup", `{"method":"GET","url":"`+tg.URL+`/lookup"}`)),
		llmtest.Reply("Found it."))
	rep := &recorder{}
	svc := streamingService(t, srv, rep)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "look"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	rep.mu.Lock()
	for _, e := range rep.events {
		if e.Kind != runner.AnswerDelta {
			got = append(got, fmt.Sprintf("%s %d %q", e.Kind, e.Message, e.Text))
		}
	}
	rep.mu.Unlock()
	want := []string{
		`thinking 1 ""`,
		`stream_ended 1 "Looking it up."`,
		`call_started 0 ""`,
		`call_finished 0 ""`,
		`thinking 3 ""`,
		`answer 3 "Found it."`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}
