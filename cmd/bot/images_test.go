package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/imagetest"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// browserServer is an MCP server whose screenshot tool answers with a
// line of text, a PNG, the same PNG said to be a JPEG (a server that
// lies), and a PNG over the size the model is shown.
func browserServer(t *testing.T, shot []byte) string {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "browser", Version: "1"}, nil)
	huge := append(append([]byte(nil), shot...), make([]byte, tools.MaxImageBytes)...)
	srv.AddTool(&sdk.Tool{Name: "screenshot", Description: "Takes a screenshot of the page.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "Screenshot of https://status.example"},
				&sdk.ImageContent{MIMEType: "image/png", Data: shot},
				&sdk.ImageContent{MIMEType: "image/jpeg", Data: shot},
				&sdk.ImageContent{MIMEType: "image/png", Data: huge},
			}}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// The lines the model and people are given for browserServer's result.
func screenshotLines(shot []byte) []string {
	return []string{
		"Screenshot of https://status.example",
		fmt.Sprintf("[image image/png, %d bytes]", len(shot)),
		fmt.Sprintf("[image image/jpeg, %d bytes: the data is not a JPEG image]", len(shot)),
		"[image image/png, 1.0 MiB: over the 1 MiB the model is shown]",
	}
}

// An MCP tool answers with images: after the call is approved, the model
// is sent the PNG in its provider's wire shape (OpenAI: a user message
// after the tool message; Anthropic: an image block in the tool_result),
// and the image that lies about its type and the one over the cap as
// lines of text only. With LLM_IMAGES=off the model gets the lines only.
// The card, the thread and the log never show the image.
func TestMCPImagesReachTheModel(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"openai", "anthropic", "openai LLM_IMAGES=off"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			shot := imagetest.PNG(8, 0)
			policy := "mcp_servers:\n  browser:\n    url: " + browserServer(t, shot) + "\n    approvers: [" + approver + "]\n"
			script := []llm.Message{
				llmtest.Reply("Taking a screenshot.", llmtest.Call("c1", "browser__screenshot", `{}`)),
				llmtest.Reply("The status page is all green."),
			}
			var anthropic *llmtest.AnthropicServer
			h := newIdleHarness(t, policy)
			switch provider {
			case "openai":
				h.model.Then(script...)
			case "openai LLM_IMAGES=off":
				h.model.Then(script...)
				h.env = append(h.env, "LLM_IMAGES=off")
			case "anthropic":
				anthropic = h.useAnthropic(script...)
			}
			h.start()
			h.command("how does the status page look?", nil, nil)
			root := h.root(1)
			card := h.cards(root, 1)[0]
			h.click(card, "approve", approver)
			h.reply(root, "The status page is all green.")

			var text string
			var images []llm.Image
			if anthropic != nil {
				reqs := anthropic.Requests()
				last := reqs[len(reqs)-1]
				if last.Problem != "" {
					t.Fatalf("Anthropic refused the request: %s", last.Problem)
				}
				result := last.Messages[len(last.Messages)-1].Content[0]
				text, images = result.ResultText(), result.Images()
			} else {
				reqs := h.model.Requests()
				last := reqs[len(reqs)-1]
				if last.Problem != "" {
					t.Fatalf("OpenAI refused the request: %s", last.Problem)
				}
				msgs := last.Messages
				for i, m := range msgs {
					if m.Role == "tool" {
						text = m.Text()
						if len(m.Images()) > 0 {
							t.Errorf("the tool message holds images")
						}
						if i+1 < len(msgs) && msgs[i+1].Role == "user" {
							images = msgs[i+1].Images()
							if !strings.Contains(msgs[i+1].Text(), "browser__screenshot") {
								t.Errorf("the images' message says %q, want it to name the tool", msgs[i+1].Text())
							}
						}
					}
				}
			}
			for _, line := range screenshotLines(shot) {
				if !strings.Contains(text, line) {
					t.Errorf("the model's tool result %q lacks the line %q", text, line)
				}
			}
			if provider == "openai LLM_IMAGES=off" {
				if len(images) != 0 {
					t.Errorf("the model was sent %d images with LLM_IMAGES=off, want none", len(images))
				}
				// The tool was asked for its text only: Redis keeps no
				// image the model would never be sent.
				thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
				if out := h.cli(t, "", "checkpoints", "show", "--thread", thread, "--json"); strings.Contains(out, `"images"`) {
					t.Errorf("with LLM_IMAGES=off the checkpoint keeps the tool's images:\n%s", out)
				}
			} else if len(images) != 1 || images[0].MIME != "image/png" || !bytes.Equal(images[0].Data, shot) {
				t.Errorf("the model was sent %d images; want the one PNG, byte for byte", len(images))
			}

			// People see the result's text (the card: its first line),
			// never the image.
			shown := h.card(card)
			if !strings.Contains(shown, "Done: Screenshot of https://status.example") {
				t.Errorf("card = %s, want the result's first line", shown)
			}
			b64 := base64.StdEncoding.EncodeToString(shot)[:16]
			for _, m := range h.slack.Messages(root.Channel, root.TS) {
				latest, _ := h.slack.Message(m.Channel, m.TS)
				if strings.Contains(latest.Text, b64) || strings.Contains(fmt.Sprint(latest.Blocks), b64) {
					t.Errorf("a message in the thread holds the image's bytes: %q", latest.Text)
				}
			}
			if strings.Contains(h.logs.String(), b64) {
				t.Error("the bot's log holds the image's bytes")
			}
		})
	}
}
