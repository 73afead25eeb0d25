package runner_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/runner"
)

// contextFull is the model's refusal of a conversation that no longer
// fits its context window, as the OpenAI client returns it.
var contextFull = &llm.StatusError{StatusCode: 400, ContextFull: true, Type: "invalid_request_error",
	Message: "This model's maximum context length is 128000 tokens."}

// A run that failed in a way a retry cannot fix is reported so, stays so
// for another replica (or after a restart), and a Retry of it — a click
// on a card an earlier version posted with the button — or a reply in its
// thread is answered with the failure without asking the model again.
func TestFinalFailureIsNotRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	model := llmtest.NewScripted().
		ThenError(contextFull).
		Then(llm.Message{Role: llm.RoleAssistant, Content: "never"})
	w.model = model
	log := logrus.New()
	log.Out = io.Discard
	hook := logtest.NewLocal(log)
	w.log = log
	rep := &recorder{}
	svc, _ := w.service(t, rep, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	failed := rep.eventsOf(runner.RunFailed)
	logged := false
	for _, e := range hook.AllEntries() {
		logged = logged || e.Message == "run failed" && e.Data["final"] == true
	}
	if !logged {
		t.Error(`no "run failed" line with final=true, want one for the operator`)
	}
	if len(failed) != 1 || !failed[0].Final || !strings.Contains(failed[0].Text, "start a new thread") {
		t.Fatalf("RunFailed events = %+v, want one, final, saying to start a new thread", failed)
	}

	other, _ := w.service(t, &recorder{}, time.Second) // another replica
	res, err := other.State(ctx, "th")
	if err != nil || res.Status() != graph.Failed || !res.Checkpoint.Final {
		t.Fatalf("State() from another replica = %v, %v; want failed for good", res, err)
	}
	var final *runner.FinalError
	if err := other.Retry(ctx, runner.Message{Thread: "th", By: "U_ALICE"}); !errors.As(err, &final) || final.Text != failed[0].Text {
		t.Errorf("Retry() = %v, want a FinalError with the failure %q", err, failed[0].Text)
	}
	if err := other.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "hello?"}); !errors.As(err, &final) {
		t.Errorf("Reply() = %v, want a FinalError", err)
	}
	if n := len(model.Requests()); n != 1 {
		t.Errorf("the model was asked %d times, want 1", n)
	}
	if res, _ := other.State(ctx, "th"); res.Status() != graph.Failed || len(res.State.Messages) != 1 {
		t.Errorf("after Retry and Reply: %s with %d messages, want failed as it was", res.Status(), len(res.State.Messages))
	}
}

// A failed checkpoint written before failures were marked final has no
// mark, whatever its error: it is retried as before.
func TestFailureSavedWithoutTheMarkIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	model := llmtest.NewScripted().
		ThenError(contextFull).
		Then(llm.Message{Role: llm.RoleAssistant, Content: "back again"})
	w.model = model
	svc, store := w.service(t, &recorder{}, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	// The same failure as an earlier version saved it.
	cp, err := store.Load(ctx, "th")
	if err != nil || !cp.Final {
		t.Fatalf("Load() = %v, %v; want the final failure", cp, err)
	}
	old := cp.Meta()
	old.ID, old.Parent, old.Seq, old.Final = cp.ID+"-old", cp.ID, cp.Seq+1, false
	old.JournalFrom = cp.JournalLen
	if err := store.Save(ctx, old); err != nil {
		t.Fatal(err)
	}

	restarted, _ := w.service(t, &recorder{}, time.Second)
	if err := restarted.Retry(ctx, runner.Message{Thread: "th", By: "U_ALICE"}); err != nil {
		t.Fatalf("Retry() = %v, want the run retried", err)
	}
	res, _ := restarted.State(ctx, "th")
	if res.Status() != graph.Done || res.State.Answer() != "back again" || len(model.Requests()) != 2 {
		t.Errorf("after Retry: %s %q, model asked %d times; want done, answered by the second request",
			res.Status(), res.State.Answer(), len(model.Requests()))
	}
}
