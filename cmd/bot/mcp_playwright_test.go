package main

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// Microsoft's Playwright MCP server, as docs/tools.md configures it,
// through the bot: a person approves the navigation to a page that
// tries to ping the channel, the model reads the page's title and is
// shown a screenshot, and the channel sees the page's words escaped.
func TestPlaywrightMCPThroughTheBot(t *testing.T) {
	t.Parallel()
	npx, home := npxForBot(t, "Playwright MCP")
	needs(t, "Chromium")
	browser := os.Getenv("CHROMIUM_PATH")
	if browser == "" {
		browser = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(browser); err != nil {
		t.Fatalf("no Chromium at %s: %v\n%s", browser, err, chromiumHint)
	}
	const title = "Status <!channel> <@U0EVE> all green"
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>%s</title><h1>%[1]s</h1>", html.EscapeString(title))
	}))
	defer page.Close()
	env := ""
	if home != "" {
		env = "\n    env: {" + home + "}"
	}
	policy := `mcp_servers:
  browser:
    command: [` + npx + `, -y, "@playwright/mcp@0.0.83", --browser, chromium, --executable-path, ` + browser + `, --headless, --isolated]` + env + `
    approvers: [` + approver + `]
tools:
  browser__browser_take_screenshot: {approval: never}
`
	h := newHarness(t, policy)
	h.model.Then(
		llmtest.Reply("Opening the status page.", llmtest.Call("c1", "browser__browser_navigate", fmt.Sprintf(`{"url":%q}`, page.URL))),
		llmtest.Reply("Looking at it.", llmtest.Call("c2", "browser__browser_take_screenshot", `{"scale":"css","type":"jpeg"}`)),
		// The page had the model repeat its words.
		llmtest.Reply("The status page is all green. Its title: "+title),
	)
	h.command("how does the status page look?", nil, nil)
	root := h.root(1)
	card := h.cardWith(root, "approve", serverStart)
	h.click(card, "approve", approver)
	replyWithin(t, h, root, "The status page is all green.", serverStart)

	reqs := h.model.Requests()
	var results []string
	var images []llm.Image
	msgs := reqs[len(reqs)-1].Messages
	for i, m := range msgs {
		if m.Role == "tool" {
			results = append(results, m.Text())
			if i+1 < len(msgs) && msgs[i+1].Role == "user" {
				images = append(images, msgs[i+1].Images()...)
			}
		}
	}
	if len(results) != 2 || !strings.Contains(results[0], "Page Title: "+title) {
		t.Fatalf("the model was told %q; want the navigation's result with the page's title as written, and the screenshot's", results)
	}
	if !strings.Contains(results[1], "[image image/jpeg, ") || len(images) != 1 || images[0].MIME != "image/jpeg" {
		t.Errorf("screenshot: the model was told %q and shown %d images; want the JPEG, after its line", results[1], len(images))
	}
	// The thread shows the page's words (the navigation's result, the
	// model's answer), and they ping nobody.
	escaped := 0
	for _, m := range h.slack.Messages(root.Channel, root.TS) {
		shown := h.card(m)
		if strings.Contains(shown, "<!channel>") || strings.Contains(shown, "<@U0EVE>") {
			t.Errorf("the thread shows the page's words as sent: %s", shown)
		}
		if strings.Contains(shown, "&lt;!channel&gt;") {
			escaped++
		}
	}
	if escaped < 2 {
		t.Errorf("%d messages show the page's title escaped, want the navigation's result and the answer", escaped)
	}
}
