package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
)

// npmServerPolicy lists servers from npm, run with npx, whose tools run
// without approval.
func npmServerPolicy(t *testing.T, servers map[string]string, env string) string {
	t.Helper()
	npx, home := npxForBot(t, "MCP servers from npm")
	if home != "" {
		home += ", "
	}
	policy := "mcp_servers:\n"
	for name, pkg := range servers {
		policy += "  " + name + ":\n    command: [" + npx + ", -y, \"" + pkg + "\"]\n    env: {" + home + env + "}\n    approval: never\n"
	}
	return policy
}

// A team's knowledge graph (server-memory) and step-by-step thinking
// (server-sequential-thinking), as published on npm: their tools, whose
// arguments are arrays of objects and fields of several types, are
// offered and run; what one call stored, the next finds; each result
// reaches the model once, though the servers send it both as text and as
// structured content.
func TestMCPMemoryAndSequentialThinkingFromNPM(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "memory-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// The server may run as nobody, who writes the graph here.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	policy := npmServerPolicy(t, map[string]string{
		"memory": "@modelcontextprotocol/server-memory",
		"think":  "@modelcontextprotocol/server-sequential-thinking",
	}, "MEMORY_FILE_PATH: "+strconv.Quote(dir+"/memory.jsonl"))
	h := newHarness(t, policy)
	h.model.Then(
		llmtest.Reply("Noting.", llmtest.Call("c1", "memory__create_entities",
			`{"entities":[{"name":"Checkout service","entityType":"service","observations":["owned by team Falcon"]}]}`)),
		llmtest.Reply("Thinking.", llmtest.Call("c2", "think__sequentialthinking",
			`{"thought":"Who owns checkout?","nextThoughtNeeded":false,"thoughtNumber":1,"totalThoughts":1}`)),
		llmtest.Reply("Looking.", llmtest.Call("c3", "memory__search_nodes", `{"query":"checkout"}`)),
		llmtest.Reply("Team Falcon owns the checkout service."),
	)
	h.command("who owns checkout?", nil, nil)
	root := h.root(1)
	replyWithin(t, h, root, "Team Falcon owns the checkout service.", serverStart)
	var told []string
	reqs := h.model.Requests()
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" {
			told = append(told, m.Text())
		}
	}
	if len(told) != 3 {
		t.Fatalf("the model was told %d tool results, want 3: %q", len(told), told)
	}
	if !strings.Contains(told[0], "Checkout service") || strings.Count(told[0], "owned by team Falcon") != 1 {
		t.Errorf("create_entities told the model %q; want the entity, once", told[0])
	}
	if !strings.Contains(told[1], `"thoughtNumber": 1`) && !strings.Contains(told[1], `"thoughtNumber":1`) {
		t.Errorf("sequentialthinking told the model %q; want its state", told[1])
	}
	if strings.Count(told[2], "owned by team Falcon") != 1 {
		t.Errorf("search_nodes told the model %q; want the entity stored by the first call, once", told[2])
	}
	if data, err := os.ReadFile(dir + "/memory.jsonl"); err != nil || !strings.Contains(string(data), "Checkout service") {
		t.Errorf("the server's graph file = %q, %v; want the entity stored", data, err)
	}
}
