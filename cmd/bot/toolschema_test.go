package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
)

// A tool whose schema no provider accepts (the spy's scalar takes a
// string) is left out of the model's requests: the conversation goes on
// with the server's other tools, and /readyz and `bot tools` name the
// tool, its server and why, with the bot still ready.
func TestToolLeftOutIsShown(t *testing.T) {
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
	resp, err := http.Get("http://" + h.addr + "/readyz")
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
