package runner_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/runner"
)

// withoutDeploy is the next version of the bot: the deploy tool is gone.
const withoutDeploy = `
tools:
  lookup: {approval: never}
  delete: {approval: required}
`

// A thread paused on deploy and delete; the bot is updated and deploy is
// no longer offered. Approving deploy runs nothing: the thread gets one
// card saying what changed, and Restart or Cancel take it on.
func TestUpdateOverAPausedThread(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"restart", "cancel"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			w, tg := newWorld(t)
			old, _ := w.service(t, nil, time.Second)
			if err := old.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Channel: "C1", Text: "ship v2"}); err != nil {
				t.Fatal(err)
			}
			deploy := waitingCall(t, old, "th", "deploy")

			// Bob approves under the old version; the new one drives.
			approve := decision("th", deploy, agent.Approve, "U_BOB")
			approve.Channel = "C1"
			if err := old.Decide(ctx, approve); err != nil {
				t.Fatalf("Decide() = %v", err)
			}
			w.policy = withoutDeploy
			rep := &recorder{}
			svc, _ := w.service(t, rep, time.Second)
			// The old version's claim took the thread's lease for a
			// drive of its own, which never came (it was replaced): the
			// new version drives once that lease has lapsed.
			for deadline := time.Now().Add(10 * time.Second); len(rep.kinds()) == 0; {
				if err := svc.Drive(ctx, "th"); err != nil {
					t.Fatalf("Drive() = %v", err)
				}
				if time.Now().After(deadline) {
					t.Fatal("the new version never drove the thread")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := svc.Drive(ctx, "th"); err != nil { // driven twice: one card
				t.Fatalf("Drive() = %v", err)
			}
			var changed []runner.Event
			for _, e := range rep.events {
				if e.Kind == runner.GraphChanged {
					changed = append(changed, e)
				}
			}
			if len(changed) != 1 || changed[0].Text != "the tool deploy is no longer available" {
				t.Fatalf("events = %v (changed %+v), want one graph_changed card naming deploy", rep.kinds(), changed)
			}
			if got := rep.kinds(); len(got) != 1 {
				t.Errorf("events = %v, want only the card: the approval was not applied", got)
			}
			if n := tg.Count("POST /deploy"); n != 0 {
				t.Fatalf("deploy ran %d times under the new version", n)
			}

			// Someone else, or a click from another channel, changes
			// nothing.
			bob := runner.Message{Thread: "th", Channel: "C1", By: "U_BOB"}
			var refused *runner.RefusedError
			if err := svc.CancelChanged(ctx, runner.Message{Thread: "th", Channel: "C2", By: "U_BOB"}); !errors.As(err, &refused) {
				t.Errorf("CancelChanged(from another channel) = %v, want a refusal", err)
			}
			var want string
			var err error
			if how == "restart" {
				err = svc.RestartChanged(ctx, bob)
				want = "deploy → Not run: the bot was updated"
			} else {
				err = svc.CancelChanged(ctx, bob)
				want = "Cancelled by user U_BOB"
			}
			if err != nil {
				t.Fatalf("%s = %v", how, err)
			}
			res, err := svc.State(ctx, "th")
			if err != nil || res.Status() != graph.Done || !strings.Contains(res.State.Answer(), want) {
				t.Fatalf("after %s: %v, answer %q; want done, answer containing %q", how, err, res.State.Answer(), want)
			}
			answers := rep.answers()
			if how == "restart" && (len(answers) != 1 || !strings.Contains(answers[0], want)) {
				t.Errorf("answers shown = %q, want one containing %q", answers, want)
			}
			if how == "cancel" {
				// The cancellation is shown as the front end's own line,
				// naming who cancelled by ID, not as the model's answer.
				var cancelled []runner.Event
				for _, e := range rep.events {
					if e.Kind == runner.RunCancelled {
						cancelled = append(cancelled, e)
					}
				}
				if len(answers) != 0 || len(cancelled) != 1 || len(cancelled[0].People) != 1 || cancelled[0].People[0] != "U_BOB" {
					t.Errorf("answers shown = %q, cancellations %+v; want no answer and one run_cancelled by U_BOB", answers, cancelled)
				}
			}
			if tg.Count("POST /deploy") != 0 || tg.Count("POST /delete") != 0 {
				t.Errorf("deploy ran %d, delete %d times; want neither", tg.Count("POST /deploy"), tg.Count("POST /delete"))
			}
			if err := svc.RestartChanged(ctx, bob); !errors.Is(err, runner.ErrNotChanged) {
				t.Errorf("RestartChanged(again) = %v, want ErrNotChanged", err)
			}
		})
	}
}

// The update removed every waiting call's tool. Who may restart or cancel
// is still the rule the calls waited under: someone it does not let
// approve is refused, and nothing changes; an approver may.
func TestWhoMayActAfterAnUpdateRemovedTheTools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	w.policy = `
tools:
  lookup: {approval: never}
  deploy: {approvers: [U0BOB]}
  delete: {approvers: [U0BOB]}
`
	old, _ := w.service(t, nil, time.Second)
	if err := old.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U0ALICE", Channel: "C1", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	waitingCall(t, old, "th", "deploy")
	w.policy = "tools:\n  lookup: {approval: never}\n"
	svc, _ := w.service(t, &recorder{}, time.Second)

	mallory := runner.Message{Thread: "th", Channel: "C1", By: "U0MALLORY"}
	var refused *runner.RefusedError
	if err := svc.CancelChanged(ctx, mallory); !errors.As(err, &refused) {
		t.Fatalf("CancelChanged(mallory) = %v, want a refusal", err)
	}
	if err := svc.RestartChanged(ctx, mallory); !errors.As(err, &refused) {
		t.Fatalf("RestartChanged(mallory) = %v, want a refusal", err)
	}
	if res, err := svc.State(ctx, "th"); err != nil || res.Status() != graph.Paused {
		t.Fatalf("after Mallory's clicks: %v, %v; want the run still paused", res.Status(), err)
	}
	if err := svc.CancelChanged(ctx, runner.Message{Thread: "th", Channel: "C1", By: "U0BOB"}); err != nil {
		t.Fatalf("CancelChanged(bob, an approver of the calls) = %v", err)
	}
	if res, err := svc.State(ctx, "th"); err != nil || res.Status() != graph.Done {
		t.Fatalf("after Bob cancelled: %v, %v; want done", res.Status(), err)
	}
	if tg.Count("POST /deploy") != 0 || tg.Count("POST /delete") != 0 {
		t.Errorf("deploy ran %d, delete %d times; want neither", tg.Count("POST /deploy"), tg.Count("POST /delete"))
	}
}
