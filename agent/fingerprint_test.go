package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/tools"
)

// reschemaed is a test tool whose schema a deploy changed.
type reschemaed struct{ *agenttest.Tool }

func (reschemaed) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"n":{"type":"string"}}}`)
}

// redeploy compiles the agent as a new version of the bot would, over the
// same store: the deploy tool with schema changed or not, and maybe a new
// tool.
func redeploy(t *testing.T, f *fixture, store graph.Store, changeDeploy, newTool bool) *agent.Agent {
	t.Helper()
	policy := policyYAML
	var deploy tools.Tool = f.deploy
	if changeDeploy {
		deploy = reschemaed{f.deploy}
	}
	ts := []tools.Tool{f.lookup, deploy, f.delete}
	if newTool {
		policy += "  extra: {approval: never}\n"
		ts = append(ts, &agenttest.Tool{ToolName: "extra"})
	}
	p, err := tools.ParsePolicy([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(p, ts...)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(&agenttest.Planner{Plan: threeCalls}, reg, store, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestDeployOverPausedThreads(t *testing.T) {
	ctx := context.Background()
	approveDeploy := func(s *agent.State) map[string]agent.Decision {
		for _, c := range s.Waiting() {
			if c.Tool == "deploy" {
				return map[string]agent.Decision{c.Key: script["deploy"]}
			}
		}
		return nil
	}
	pause := func(t *testing.T) (*fixture, graph.Store, *graph.Result[agent.State]) {
		store := graph.NewMemoryStore(graph.MemoryOptions{})
		f := newFixture(t, store, nil, true)
		res, err := f.g.Start(ctx, "t", agent.NewState("t", "U_ALICE", "C1", "go"), graph.RunConfig{})
		if err != nil || res.Status() != graph.Paused {
			t.Fatalf("Start() = %v, %v; want paused", res, err)
		}
		return f, store, res
	}

	t.Run("a new tool resumes", func(t *testing.T) {
		f, store, res := pause(t)
		a := redeploy(t, f, store, false, true)
		out, err := a.Graph().Resume(ctx, "t", a.Decide(approveDeploy(&res.State)))
		if err != nil || out.Status() != graph.Paused || !slices.Equal(f.deploy.Runs(), []string{`{"n":2}`}) {
			t.Fatalf("Resume() = %v, %v, deploy ran %v; want deploy run once, still paused on delete", out, err, f.deploy.Runs())
		}
	})

	t.Run("the pending call's tool changed", func(t *testing.T) {
		f, store, res := pause(t)
		a := redeploy(t, f, store, true, false)
		_, err := a.Graph().Resume(ctx, "t", a.Decide(approveDeploy(&res.State)))
		var inc *graph.IncompatibleError
		if !errors.As(err, &inc) {
			t.Fatalf("Resume() = %v, want an *IncompatibleError", err)
		}
		if got := agent.Incompatible(inc.Changes); !slices.Equal(got, []string{"the tool deploy changed its arguments"}) {
			t.Errorf("Incompatible() = %q, want the deploy tool named", got)
		}
		if len(f.deploy.Runs()) != 0 {
			t.Fatalf("deploy ran %v under an incompatible resume", f.deploy.Runs())
		}

		// Restart: the model plans again, told the calls did not run.
		out, err := a.Restart(ctx, "t")
		if err != nil {
			t.Fatalf("Restart() = %v", err)
		}
		if out.Status() != graph.Done || !strings.Contains(out.State.Answer(), "deploy → Not run: the bot was updated") || len(f.deploy.Runs()) != 0 {
			t.Errorf("Restart() = %s %q, deploy ran %d times; want the model's new answer, deploy not run", out.Status(), out.State.Answer(), len(f.deploy.Runs()))
		}
	})

	t.Run("cancel", func(t *testing.T) {
		f, store, _ := pause(t)
		a := redeploy(t, f, store, true, false)
		out, err := a.Cancel(ctx, "t", "U_BOB")
		if err != nil || out.Status() != graph.Done || !strings.HasPrefix(out.State.Answer(), "Cancelled by user U_BOB") {
			t.Fatalf("Cancel() = %v, %v; want done with the cancellation as the answer", out, err)
		}
		// The conversation goes on with a reply.
		out, err = a.Graph().Continue(ctx, "t", agent.UserTurn("U_ALICE", "never mind"))
		if err != nil || out.Status() != graph.Paused {
			t.Errorf("Continue() = %v, %v; want a new turn", out, err)
		}
		if len(f.deploy.Runs()) != 0 {
			t.Errorf("deploy ran %v", f.deploy.Runs())
		}
	})
}
