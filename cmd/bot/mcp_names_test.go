package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/tools/mcp"
)

// A server with tool names the providers refuse (a dot, a slash, 90
// characters), a schema behind "$ref"/"$defs" with anyOf and a nullable
// field, structured output, and results with a resource link and an
// embedded resource whose names carry Slack markup. The model is offered
// valid names and calls them; the card names the tool as its server does;
// the server runs the call under its own name, once; the model gets the
// structured content and the resources as text, and the thread's result
// shows them with no mention alive.
func TestMCPRealWorldToolShapes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ran := map[string]int{}
	long := "search_issues_across_every_repository_of_the_organisation_including_archived_ones_x"
	srv := sdk.NewServer(&sdk.Implementation{Name: "gh", Version: "1"}, nil)
	count := func(req *sdk.CallToolRequest) {
		mu.Lock()
		ran[req.Params.Name]++
		mu.Unlock()
	}
	srv.AddTool(&sdk.Tool{Name: "issues.get", Description: "Gets an issue.",
		InputSchema: map[string]any{
			"type": "object",
			"$ref": "#/$defs/Args",
			"$defs": map[string]any{"Args": map[string]any{"type": "object",
				"properties": map[string]any{
					"number": map[string]any{"type": "integer"},
					"repo":   map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "null"}}},
				}, "required": []any{"number"}}},
		},
		OutputSchema: map[string]any{"type": "object", "properties": map[string]any{"title": map[string]any{"type": "string"}}},
	}, func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		count(req)
		return &sdk.CallToolResult{
			Content:           []sdk.Content{&sdk.TextContent{Text: "Issue 7"}},
			StructuredContent: map[string]any{"title": "Crash on start"},
		}, nil
	})
	srv.AddTool(&sdk.Tool{Name: long, InputSchema: map[string]any{"type": "object", "properties": map[string]any{}}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			count(req)
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.ResourceLink{URI: "gh://issues/7", Name: "<!here> issue *7*"},
				&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "gh://issues/8", MIMEType: "text/plain", Text: "<!channel> see <https://evil.example|this>"}},
			}}, nil
		})
	srv.AddTool(&sdk.Tool{Name: "repos/list", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			count(req)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a, b"}}}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)

	getName, longName, listName := mcp.ToolName("gh", "issues.get"), mcp.ToolName("gh", long), mcp.ToolName("gh", "repos/list")
	h := newHarness(t, "mcp_servers:\n  gh:\n    url: "+hs.URL+"\n    approvers: ["+approver+"]\n")
	h.model.Then(
		llmtest.Reply("Looking.", llmtest.Call("c1", getName, `{"number":7,"repo":null}`)),
		llmtest.Reply("Searching.", llmtest.Call("c2", longName, `{}`)),
		llmtest.Reply("Issue 7: Crash on start."),
	)
	h.command("what is issue 7?", nil, nil)
	root := h.root(1)

	card := h.cardWith(root, "approve", serverStart)
	valid := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	offered := map[string]bool{}
	for _, tool := range h.model.Requests()[0].Tools {
		offered[tool.Function.Name] = true
		if !valid.MatchString(tool.Function.Name) {
			t.Errorf("the model was offered %q, a name the providers refuse", tool.Function.Name)
		}
	}
	for _, name := range []string{getName, longName, listName} {
		if !offered[name] {
			t.Errorf("%s was not offered; offered %v", name, offered)
		}
	}

	if got := h.card(card); !strings.Contains(got, "tool `issues.get`") {
		t.Errorf("the card does not name the server's tool issues.get: %s", got)
	}
	h.click(card, "approve", approver)
	h.eventually(func() bool { return len(h.cards(root, 2)) >= 2 }, "the second call's card")
	card2 := h.cards(root, 2)[1]
	if got := h.card(card2); !strings.Contains(got, "tool `"+long+"`") {
		t.Errorf("the card does not name the server's tool %s: %s", long, got)
	}
	h.click(card2, "approve", approver)
	h.reply(root, "Issue 7: Crash on start.")

	var told []string
	for _, r := range h.model.Requests() {
		for _, m := range r.Messages {
			if m.Role == "tool" {
				told = append(told, m.Text())
			}
		}
	}
	all := strings.Join(told, "\n")
	for _, want := range []string{"Issue 7", `"title":"Crash on start"`, "gh://issues/7", "gh://issues/8", "<!channel> see"} {
		if !strings.Contains(all, want) {
			t.Errorf("the model was not told %q; it was told %q", want, told)
		}
	}
	mu.Lock()
	if ran["issues.get"] != 1 || ran[long] != 1 || len(ran) != 2 {
		t.Errorf("the server ran %v; want issues.get and the long one once each, under their own names", ran)
	}
	mu.Unlock()
	var result string
	h.eventually(func() bool {
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if strings.Contains(c.Text, "gh://issues/7") {
				result = c.Text
				return true
			}
		}
		return false
	}, "the second call's result in the thread")
	for _, live := range []string{"<!here>", "<!channel>", "<https://"} {
		if strings.Contains(result, live) {
			t.Errorf("the thread's result holds %q, live: %s", live, result)
		}
	}
	if !strings.Contains(result, "&lt;!here&gt;") {
		t.Errorf("the thread's result does not show the link's name, escaped: %s", result)
	}
}
