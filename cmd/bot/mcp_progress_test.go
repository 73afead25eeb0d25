package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/llm/llmtest"
)

// A server whose progress notifications carry numbers of 300 digits and
// a megabyte of words with Slack markup: what people see of it is one
// short line, with the numbers written short, the server's first words
// still on it, and no mention or link alive; the call still finishes.
func TestMCPHostileProgressIsShownShortAndEscaped(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := sdk.NewServer(&sdk.Implementation{Name: "noisy", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "crunch", Description: "Crunches.", InputSchema: map[string]any{"type": "object", "properties": map[string]any{}}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			msg := "Crunching <!channel> *now* <https://evil.example|click> " + strings.Repeat("x", 1<<20)
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: 1e300, Total: 3e300, Message: msg})
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "crunched"}}}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	h := newHarness(t, "mcp_servers:\n  noisy:\n    url: "+hs.URL+"\n    approvers: ["+approver+"]\n")
	h.restartWith("SLACK_STREAMING=off")
	h.model.Then(
		llmtest.Reply("Crunching.", llmtest.Call("c1", "noisy__crunch", `{}`)),
		llmtest.Reply("Crunched."),
	)
	h.command("crunch it", nil, nil)
	root := h.root(1)
	card := h.cardWith(root, "approve", serverStart)
	h.click(card, "approve", approver)
	var shown string
	h.eventually(func() bool {
		for _, c := range h.slack.CallsTo("chat.update") {
			if b := string(c.Blocks); c.TS == card.TS && strings.Contains(b, "Progress: ") {
				shown = strings.NewReplacer(`\u0026`, "&", `\u003c`, "<", `\u003e`, ">").Replace(b)
				return true
			}
		}
		return false
	}, "the card to show the call's progress")
	close(release)
	h.reply(root, "Crunched.")
	i := strings.Index(shown, "⏳ Progress: ")
	line := shown[i:]
	line = line[:strings.IndexByte(line, '"')]
	if !strings.HasPrefix(line, "⏳ Progress: 1e+300 of 3e+300 (33%) — Crunching &lt;!channel&gt;") {
		t.Errorf("the progress line is %.300q; want the numbers short, then the server's words, escaped", line)
	}
	if len(line) > 300 {
		t.Errorf("the progress line is %d bytes long; want it clipped", len(line))
	}
	for _, live := range []string{"<!channel>", "<https://"} {
		if strings.Contains(shown, live) {
			t.Errorf("the card holds %q, live: %.400s", live, shown)
		}
	}
	if got := lastToolResult(t, h); got != "crunched" {
		t.Errorf("the model was told %q, want the result", got)
	}
}
