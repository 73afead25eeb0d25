package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// notionTools are tools Notion's MCP server offers (@notionhq/notion-mcp-server,
// generated from Notion's OpenAPI description: nested objects, oneOf,
// enums, arrays of objects), one of each kind of schema.
var notionTools = []string{
	"notion__API-post-page", "notion__API-patch-block-children", "notion__API-query-data-source",
	"notion__API-post-search", "notion__API-get-self", "notion__API-update-page-markdown",
}

// Notion's MCP server, run as teams run it, through the bot: every one
// of its tools is offered to the model, and its schemas, as the bot
// sends them, are ones OpenAI and Anthropic take (their fakes refuse
// what the real APIs refuse). No call is made: a call would go to
// Notion's API.
func TestNotionMCPToolsReachTheModel(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			npx, home := npxForBot(t, "Notion's MCP server")
			env := `NOTION_TOKEN: "ntn_not_a_real_token"`
			if home != "" {
				env += ", " + home
			}
			h := newIdleHarness(t, `mcp_servers:
  notion:
    command: [`+npx+`, -y, "@notionhq/notion-mcp-server@2.5.2"]
    env: {`+env+`}
    approvers: [`+approver+`]
`)
			script := []llm.Message{llmtest.Reply("I can search, read and write your Notion pages.")}
			var anthropic *llmtest.AnthropicServer
			if provider == "anthropic" {
				anthropic = h.useAnthropic(script...)
			} else {
				h.model.Then(script...)
			}
			h.start()
			h.command("what can you do in Notion?", nil, nil)
			h.reply(h.root(1), "I can search, read and write your Notion pages.")

			schemas := map[string]json.RawMessage{}
			if anthropic != nil {
				req := anthropic.Requests()[0]
				if req.Problem != "" {
					t.Fatalf("Anthropic refused the request: %s", req.Problem)
				}
				for _, tool := range req.Tools {
					schemas[tool.Name] = tool.InputSchema
				}
			} else {
				req := h.model.Requests()[0]
				if req.Problem != "" {
					t.Fatalf("OpenAI refused the request: %s", req.Problem)
				}
				for _, tool := range req.Tools {
					schemas[tool.Function.Name] = tool.Function.Parameters
				}
			}
			notion := 0
			for name := range schemas {
				if strings.HasPrefix(name, "notion__") {
					notion++
				}
			}
			if notion < 20 {
				t.Errorf("the model was offered %d of Notion's tools, want all of them (24 in 2.5.2)", notion)
			}
			for _, name := range notionTools {
				var schema struct {
					Type       string                     `json:"type"`
					Properties map[string]json.RawMessage `json:"properties"`
				}
				if err := json.Unmarshal(schemas[name], &schema); err != nil || schema.Type != "object" || schema.Properties == nil {
					t.Errorf("%s: offered with the schema %s (%v); want an object schema with its properties", name, schemas[name], err)
				}
			}
		})
	}
}
