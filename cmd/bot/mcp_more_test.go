package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
)

// server-everything's simulate-research-query runs only as a task, which
// the client cannot do: it is not offered, so no card is ever shown for a
// call that would fail, and `bot tools` and /readyz say why it is missing.
func TestMCPTaskOnlyToolIsNotOffered(t *testing.T) {
	h := newHarness(t, everythingPolicy(t, ""))
	h.model.Then(llmtest.Reply("Adding.", llmtest.Call("c1", "everything__get-sum", `{"a":1,"b":1}`)))
	h.command("add", nil, nil)
	h.cards(h.root(1), 1)
	offered := map[string]bool{}
	for _, tool := range h.model.Requests()[0].Tools {
		offered[tool.Function.Name] = true
	}
	if !offered["everything__get-sum"] || offered["everything__simulate-research-query"] {
		t.Errorf("offered %v; want get-sum but not the task-only simulate-research-query", offered)
	}
	const why = "runs only as a task (execution.taskSupport: required)"
	var readyz string
	h.eventually(func() bool {
		resp, err := http.Get("http://" + h.addr + "/readyz")
		if err != nil {
			return false
		}
		readyz = readAll(t, resp)
		return strings.Contains(readyz, "left out \"simulate-research-query\": it "+why)
	}, "/readyz to say the task-only tool is left out")
	out, code := runBot(t, h.env, "", "tools")
	if code != 0 {
		t.Fatalf("bot tools exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "MCP server everything lists these tools, which are not offered:\n  simulate-research-query: it "+why) {
		t.Errorf("bot tools does not say why simulate-research-query is missing:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "everything__simulate-research-query") {
			t.Errorf("bot tools lists the task-only tool as offered: %s", line)
		}
	}
}
