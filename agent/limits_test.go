package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
)

// A turn with more tool calls than the cap: the first ones wait for
// people as usual; the rest fail at once with an error result the model
// reads, and neither run nor wait.
func TestCallsPastTheCapOfATurnFail(t *testing.T) {
	const asked = 12
	model := func(string) []llm.ToolCall {
		var calls []llm.ToolCall
		for i := range asked {
			calls = append(calls, llm.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "deploy", Arguments: fmt.Sprintf(`{"n":%d}`, i)})
		}
		return calls
	}
	f := newFixture(t, graph.NewMemoryStore(graph.MemoryOptions{}), &agenttest.Planner{Plan: model}, true)
	res, err := f.g.Start(context.Background(), "t", agent.NewState("t", "U1", "C1", "deploy everything"), graph.RunConfig{})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if res.Status() != graph.Paused {
		t.Fatalf("Start() status = %s, want paused", res.Status())
	}
	if n := len(res.State.Waiting()); n != 10 {
		t.Errorf("%d calls wait for a person, want 10 (the default cap)", n)
	}
	for _, c := range res.State.Calls[10:] {
		if c.Status != agent.Failed || !c.IsError || !strings.Contains(c.Result, "at most 10 tool calls") {
			t.Errorf("call %s = %s %q; want failed with an error about the cap", c.Key, c.Status, c.Result)
		}
	}
	if n := len(f.deploy.Runs()); n != 0 {
		t.Errorf("deploy ran %d times before anyone decided", n)
	}
}
