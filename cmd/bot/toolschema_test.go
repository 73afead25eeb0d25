package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/tools"
)

// A tool whose schema no provider accepts (the spy's scalar takes a
// string) is left out of the model's requests: the conversation goes on
// with the server's other tools, and /readyz and `bot tools` name the
// tool, its server and why, with the bot still ready.
func TestToolLeftOutIsShown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spyPolicy(t))
	h.model.Then(llmtest.Reply("Looking around.", llmtest.Call("s1", "spy__probe", `{}`)), llmtest.Reply("Seen it all."))
	h.command("look around", nil, nil)
	root := h.root(1)
	h.reply(root, "Seen it all.")

	reqs := h.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model was asked %d times, want 2 (the call and the answer)", len(reqs))
	}
	var offered []string
	for _, tool := range reqs[0].Tools {
		offered = append(offered, tool.Function.Name)
	}
	for _, want := range []string{"spy__probe", "spy__huge", "http_request"} {
		if !slices.Contains(offered, want) {
			t.Errorf("the model was offered %v, want %s among them", offered, want)
		}
	}
	if slices.Contains(offered, "spy__scalar") {
		t.Errorf("the model was offered spy__scalar, whose arguments are not an object: %v", offered)
	}
	ran := false
	for _, m := range reqs[1].Messages {
		ran = ran || m.Role == "tool" && strings.Contains(m.Text(), "uid ")
	}
	if !ran {
		t.Errorf("the spy's probe did not run; the model was sent %+v", reqs[1].Messages)
	}

	const why = "spy__scalar (mcp spy: scalar): tool schema not accepted by the provider: the arguments are of type \"string\", not an object"
	resp, err := botClient.Get("http://" + h.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	readyz := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(readyz, "ready\n") {
		t.Errorf("/readyz = %d %q, want ready: a tool left out is no reason not to be", resp.StatusCode, readyz)
	}
	if !strings.Contains(readyz+"\n", "tool left out: "+why+"\n") {
		t.Errorf("/readyz = %q\nwant the left-out tool named: %q", readyz, why)
	}
	if strings.Count(readyz, "tool left out:") != 1 {
		t.Errorf("/readyz = %q, want only spy__scalar left out", readyz)
	}

	out, code := runBot(t, h.env, "", "tools")
	if code != 0 {
		t.Fatalf("bot tools exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "is not offered these tools:\n  "+why+"\n") {
		t.Errorf("bot tools = %s\nwant the left-out tool named: %q", out, why)
	}
	if strings.Contains(out, "spy__probe (mcp spy") {
		t.Errorf("bot tools = %s\nwant spy__probe offered, not left out", out)
	}
}

// scalarTool is an MCP server's tool whose arguments are a string, with
// the name its server gave it.
type scalarTool struct{ remote string }

func (scalarTool) Name() string                    { return "odd__scalar" }
func (scalarTool) Description() string             { return "Takes a string." }
func (scalarTool) Schema() json.RawMessage         { return json.RawMessage(`{"type":"string"}`) }
func (scalarTool) Idempotent(json.RawMessage) bool { return true }
func (scalarTool) Call(context.Context, json.RawMessage) (string, error) {
	return "", nil
}
func (t scalarTool) Origin() tools.Origin { return tools.Origin{Server: "odd", Tool: t.remote} }

// A server that names its tool with a line break cannot add a line of its
// own to /readyz: the name is quoted.
func TestLeftOutToolNameIsOneLine(t *testing.T) {
	t.Parallel()
	model, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		t.Fatal(err)
	}
	lines := leftOut(model, []tools.Tool{scalarTool{remote: "scalar\nready\x1b[2J"}})
	if len(lines) != 1 {
		t.Fatalf("left out %q, want one line", lines)
	}
	if want := `odd__scalar (mcp odd: "scalar\nready\x1b[2J"): `; !strings.HasPrefix(lines[0], want) || strings.ContainsAny(lines[0], "\n\x1b") {
		t.Errorf("left out %q, want it to start with %q and be one line", lines[0], want)
	}
}
