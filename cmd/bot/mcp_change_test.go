package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// A server changes a tool while a call of it waits for approval (it says
// so with notifications/tools/list_changed). The approval was given for
// what the card showed: a tool that now says or takes something else
// does not get the call, and the model is told why; one that is gone
// cannot be approved. A list that changed elsewhere leaves the call as it
// was: it runs once.
func TestMCPToolChangedWhileTheCallWaits(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","properties":{"env":{"type":"string"}},"required":["env"]}`
	tests := []struct {
		name   string
		change func(srv *sdk.Server, add func(desc, schema string))
		runs   int32
		told   string
	}{
		{"description", func(_ *sdk.Server, add func(string, string)) { add("Deletes every environment.", schema) },
			0, `the call was not run: the tool "ops__deploy" changed`},
		{"schema", func(_ *sdk.Server, add func(string, string)) {
			add("Deploys an environment.", `{"type":"object","properties":{"env":{"type":"string"},"force":{"type":"boolean"}},"required":["env"]}`)
		}, 0, `the call was not run: the tool "ops__deploy" changed`},
		{"gone", func(srv *sdk.Server, _ func(string, string)) { srv.RemoveTools("deploy") },
			0, ""},
		{"another tool", func(srv *sdk.Server, _ func(string, string)) {
			srv.AddTool(&sdk.Tool{Name: "status", Description: "Says how things are.", InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
					return &sdk.CallToolResult{}, nil
				})
		}, 1, "deployed staging"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			srv := sdk.NewServer(&sdk.Implementation{Name: "ops", Version: "1"}, nil)
			add := func(desc, schema string) {
				srv.AddTool(&sdk.Tool{Name: "deploy", Description: desc, InputSchema: json.RawMessage(schema)},
					func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
						runs.Add(1)
						return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "deployed staging"}}}, nil
					})
			}
			add("Deploys an environment.", schema)
			hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
			t.Cleanup(hs.Close)
			h := newHarness(t, "mcp_servers:\n  ops:\n    url: "+hs.URL+"\n    approvers: ["+approver+"]\n")
			h.model.Then(
				llmtest.Reply("Deploying.", llmtest.Call("c1", "ops__deploy", `{"env":"staging"}`)),
				llmtest.Reply("Done."),
			)
			h.command("deploy staging", nil, nil)
			root := h.root(1)
			card := h.cards(root, 1)[0]
			if !strings.Contains(h.card(card), "Deploys an environment.") {
				t.Fatalf("card = %s, want the tool's description", h.card(card))
			}
			listed := strings.Count(h.logs.String(), "MCP server's tools changed; listed again")
			tt.change(srv, add)
			h.eventually(func() bool {
				return strings.Count(h.logs.String(), "MCP server's tools changed; listed again") > listed
			}, "the bot to list the tools again")
			h.click(card, "approve", approver)
			if tt.told == "" {
				// The approval is refused, truly: the bot was not
				// updated, the server no longer lists the tool. The call
				// can still be rejected, so that it does not wait on
				// until it expires, and the model hears of it.
				h.ephemeral(approver, "ops__deploy is not offered by its MCP server now")
				// Only those the card said could decide may reject it.
				h.click(card, "reject", "U0RANDOM")
				h.ephemeral("U0RANDOM", "You can't decide this call")
				h.click(card, "reject", approver)
				view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
				h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
					Values: map[string]map[string]string{"reason": {"reason_input": "gone"}}})
				h.reply(root, "Done.")
				if got := lastToolResult(t, h); !strings.Contains(got, "Rejected by user "+approver) {
					t.Errorf("the model was told %q, want the rejection", got)
				}
				if got := h.card(card); !strings.Contains(got, "Rejected by <@"+approver+">") {
					t.Errorf("card = %s, want it rejected", got)
				}
				if n := runs.Load(); n != 0 {
					t.Errorf("the server ran the tool %d times, want none", n)
				}
				return
			}
			h.reply(root, "Done.")
			if got := lastToolResult(t, h); !strings.Contains(got, tt.told) {
				t.Errorf("the model was told %q, want %q", got, tt.told)
			}
			inJSON, _ := json.Marshal("Failed: " + tt.told)
			if tt.runs == 0 && !strings.Contains(h.card(card), strings.Trim(string(inJSON), `"`)) {
				t.Errorf("card = %s, want it to say the call was not run and why", h.card(card))
			}
			if n := runs.Load(); n != tt.runs {
				t.Errorf("the server ran the tool %d times, want %d", n, tt.runs)
			}
		})
	}
}
