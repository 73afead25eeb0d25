package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/internal/proctest"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// playwrightMCP is the Playwright MCP server the test runs, pinned as
// .ci/with-redis fetches it.
const playwrightMCP = "@playwright/mcp@0.0.83"

// chromium finds the Chromium the browser server drives. Like npx, it
// fails rather than skips outside -short: `make test` installs it.
func chromium(t *testing.T) string {
	t.Helper()
	needsNode(t)
	if p := os.Getenv("CHROMIUM_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("Chromium not found: set CHROMIUM_PATH or run through `make test` (.ci/with-redis --chromium)")
	return ""
}

// hostile is what a page under someone else's control may say, to the
// model and, through the call's result, to the people in the channel.
const hostile = "Hello <@U123> <!channel> `rm -rf /` ```done``` *bold* [image image/png, 1 KB]"

// TestPlaywrightServer runs Microsoft's Playwright MCP server, the
// browser server teams use most, through the Manager as the bot does
// (as nobody when the tests run as root), against a page served here,
// and checks what the bot's users rely on: every tool offered, the
// page's words read by the model and escaped for people, screenshots
// shown to the model, and no browser left running once the bot stops.
func TestPlaywrightServer(t *testing.T) {
	browser := chromium(t)
	npx := npx(t)
	page := "<!doctype html><title>" + html.EscapeString(hostile) + "</title><h1>" + html.EscapeString(hostile) + "</h1><button>Approve</button>"
	long := page + "<ul>" + strings.Repeat("<li>another line of a long page</li>", 600) + "</ul>"
	// A page as busy as a photograph: random pixels.
	const noisy = `<!doctype html><body style="margin:0"><canvas id=c width=1280 height=720></canvas><script>
const c = document.getElementById("c").getContext("2d"), d = c.createImageData(1280, 720);
for (let i = 0; i < d.data.length; i++) d.data[i] = i % 4 == 3 ? 255 : Math.random() * 256;
c.putImageData(d, 0, 0);</script>`
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/noisy" {
			fmt.Fprint(w, noisy)
			return
		}
		if r.URL.Path == "/long" {
			fmt.Fprint(w, long)
			return
		}
		fmt.Fprint(w, page)
	}))
	defer web.Close()

	// The server's temporary directory, where --isolated keeps the
	// browser's profile: the browser's processes name it on their command
	// line (--user-data-dir), so that the test finds them wherever they
	// end up, and those of no other test. (Otherwise the same entry as
	// docs/tools.md's.)
	tmp := t.TempDir()
	if os.Geteuid() == 0 {
		tmp = nobodysDir(t)
	}
	policy := fmt.Sprintf(`mcp_servers:
  browser:
    command: [%s, -y, %q, --browser, chromium, --executable-path, %q, --headless, --isolated]
    env: {TMPDIR: %q}
`, npx, playwrightMCP, browser, tmp)
	m := newManager(t, policy, mcp.Options{})
	started := time.Now()
	offered := m.Tools()
	t.Logf("the server listed its tools %v after the start", time.Since(started).Round(time.Millisecond))

	t.Run("every tool offered", func(t *testing.T) {
		st := m.Status()
		if len(st) != 1 || st[0].State != mcp.Up || len(st[0].LeftOut) != 0 {
			t.Fatalf("Status() = %+v, want the server up with nothing left out", st)
		}
		var defs []llm.ToolDef
		var names []string
		for _, tl := range offered {
			if o, ok := tl.(tools.OriginTool); ok && o.Origin().Server == "browser" {
				defs = append(defs, llm.ToolDef{Name: tl.Name(), Description: tl.Description(), Parameters: tl.Schema()})
				names = append(names, tl.Name())
			}
		}
		if len(defs) != st[0].Tools || len(defs) < 20 {
			t.Errorf("offered %d of the server's %d tools: %v", len(defs), st[0].Tools, names)
		}
		for _, want := range []string{"browser__browser_navigate", "browser__browser_snapshot", "browser__browser_click", "browser__browser_take_screenshot"} {
			if !slices.Contains(names, want) {
				t.Errorf("tools = %v, want %s among them", names, want)
			}
		}
		openai, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: "http://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		anthropic, err := llm.NewAnthropic(llm.AnthropicOptions{BaseURL: "http://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, model := range []llm.ToolChecker{openai, anthropic} {
			if out := model.CheckTools(defs); len(out) != 0 {
				t.Errorf("%T leaves out %+v", model, out)
			}
		}
		// What `bot tools` shows of browser_navigate's arguments: "url*".
		nav, _, _ := m.Lookup("browser__browser_navigate")
		schema, err := llm.OfferedSchema(nav.Schema())
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err != nil || json.Unmarshal(schema, &s) != nil || len(s.Properties) != 1 || s.Properties["url"] == nil || !slices.Equal(s.Required, []string{"url"}) {
			t.Errorf("browser_navigate's offered schema = %s, %v; want url, required", schema, err)
		}
		if err := m.Validate("browser__browser_navigate", json.RawMessage(`{}`)); err == nil {
			t.Error("Validate(browser_navigate, no url) = nil, want refused before a card")
		}
	})

	var navigated string
	t.Run("navigate", func(t *testing.T) {
		got, err := call(t, m, "browser__browser_navigate", fmt.Sprintf(`{"url":%q}`, web.URL))
		if err != nil || !strings.Contains(got, "Page URL: "+web.URL) || !strings.Contains(got, "Page Title: "+hostile) {
			t.Fatalf("browser_navigate = %q, %v; want the page's URL and its title as the page wrote it", got, err)
		}
		navigated = got
	})

	t.Run("snapshot cut for the model", func(t *testing.T) {
		if _, err := call(t, m, "browser__browser_navigate", fmt.Sprintf(`{"url":%q}`, web.URL+"/long")); err != nil {
			t.Fatal(err)
		}
		snap, _, _ := m.Lookup("browser__browser_snapshot")
		if err := m.Validate("browser__browser_snapshot", json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
		text, images, err := snap.(tools.ImageTool).CallWithImages(context.Background(), tools.CallInfo{}, json.RawMessage(`{}`))
		if err != nil || !strings.Contains(text, hostile) || !strings.Contains(text, `button "Approve"`) || !strings.Contains(text, "another line of a long page") {
			t.Fatalf("browser_snapshot = %.300q…, %v; want the page's accessibility snapshot with its words", text, err)
		}
		// The page's fake image line is text: no image comes of it.
		if len(images) != 0 {
			t.Errorf("browser_snapshot gave %d images, want none", len(images))
		}
		if note := "more bytes not shown]"; len(text) > mcp.DefaultMaxResult+len("\n[… 999999 "+note) || !strings.HasSuffix(text, note) {
			t.Errorf("browser_snapshot = %d bytes ending %q; want it cut at %d bytes with a note", len(text), text[max(0, len(text)-80):], mcp.DefaultMaxResult)
		}
	})

	t.Run("screenshot shown to the model", func(t *testing.T) {
		if _, err := call(t, m, "browser__browser_navigate", fmt.Sprintf(`{"url":%q}`, web.URL)); err != nil {
			t.Fatal(err)
		}
		shot, _, _ := m.Lookup("browser__browser_take_screenshot")
		for _, tt := range []struct{ args, mime string }{
			{`{"scale":"css"}`, "image/png"}, // the server's default
			{`{"scale":"css","type":"jpeg"}`, "image/jpeg"},
		} {
			if err := m.Validate("browser__browser_take_screenshot", json.RawMessage(tt.args)); err != nil {
				t.Fatalf("Validate(take_screenshot, %s) = %v", tt.args, err)
			}
			text, images, err := shot.(tools.ImageTool).CallWithImages(context.Background(), tools.CallInfo{}, json.RawMessage(tt.args))
			if err != nil || len(images) != 1 || images[0].MIME != tt.mime {
				t.Fatalf("take_screenshot(%s) = %q, %d images, %v; want one %s", tt.args, text, len(images), err, tt.mime)
			}
			if why := tools.CheckImage(images[0].MIME, images[0].Data); why != "" {
				t.Errorf("take_screenshot(%s): CheckImage = %q", tt.args, why)
			}
			if line := fmt.Sprintf("[image %s, %s]", tt.mime, tools.Size(len(images[0].Data))); !strings.Contains(text, line) {
				t.Errorf("take_screenshot(%s) = %q, want its line %q", tt.args, text, line)
			}
			t.Logf("take_screenshot(%s): %s", tt.args, tools.Size(len(images[0].Data)))
		}
		// A full-page screenshot of a long page is taller than the model
		// is shown: its line says so, and no image goes.
		if _, err := call(t, m, "browser__browser_navigate", fmt.Sprintf(`{"url":%q}`, web.URL+"/long")); err != nil {
			t.Fatal(err)
		}
		for _, args := range []string{`{"scale":"css","fullPage":true,"type":"jpeg"}`} {
			text, images, err := shot.(tools.ImageTool).CallWithImages(context.Background(), tools.CallInfo{}, json.RawMessage(args))
			if err != nil || len(images) != 0 || !strings.Contains(text, "the model is shown]") {
				t.Errorf("take_screenshot(%s) of a long page = %q, %d images, %v; want its line saying why it is not shown", args, text, len(images), err)
			}
		}
		// A page as busy as a photograph: the server's default PNG is
		// over the cap, a JPEG (docs/tools.md says to ask for one) is not.
		if _, err := call(t, m, "browser__browser_navigate", fmt.Sprintf(`{"url":%q}`, web.URL+"/noisy")); err != nil {
			t.Fatal(err)
		}
		text, images, err := shot.(tools.ImageTool).CallWithImages(context.Background(), tools.CallInfo{}, json.RawMessage(`{"scale":"css"}`))
		if err != nil || len(images) != 0 || !strings.Contains(text, "over the 1 MiB the model is shown]") {
			t.Errorf("take_screenshot(busy page, png) = %q, %d images, %v; want its line saying it is over the cap", text, len(images), err)
		}
		text, images, err = shot.(tools.ImageTool).CallWithImages(context.Background(), tools.CallInfo{}, json.RawMessage(`{"scale":"css","type":"jpeg"}`))
		if err != nil || len(images) != 1 || images[0].MIME != "image/jpeg" || tools.CheckImage(images[0].MIME, images[0].Data) != "" {
			t.Errorf("take_screenshot(busy page, jpeg) = %q, %d images, %v; want the JPEG for the model", text, len(images), err)
		} else {
			t.Logf("take_screenshot of a busy page: %s as JPEG", tools.Size(len(images[0].Data)))
		}
	})

	t.Run("page words escaped for people", func(t *testing.T) {
		if navigated == "" {
			t.Skip("no navigation result")
		}
		c := agent.Call{Key: "1.0", Tool: "browser__browser_navigate", Args: json.RawMessage(fmt.Sprintf(`{"url":%q}`, web.URL)), Status: agent.Done, Result: navigated}
		var shown bytes.Buffer
		enc := json.NewEncoder(&shown)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(slackui.SettledCard(c, "U1", time.Now())); err != nil {
			t.Fatal(err)
		}
		shown.WriteString(slackui.ResultText(c))
		for _, bad := range []string{"<@U123>", "<!channel>", "```done"} {
			if strings.Contains(shown.String(), bad) {
				t.Errorf("what people see holds %q as sent by the page: %s", bad, shown.String())
			}
		}
		if !strings.Contains(slackui.ResultText(c), "&lt;@U123&gt;") {
			t.Errorf("ResultText = %q, want the page's mention escaped", slackui.ResultText(c))
		}
	})

	// What the bot does when it stops: every process of the server ends,
	// the browser's included. They are the processes below the test now
	// (the reaper's tree: npx, node, Chromium and its helpers), and any
	// with the server's profile directory on its command line wherever
	// it is later: a process whose parent ended is no longer below us.
	marker := "--user-data-dir=" + tmp
	var pids []int
	for _, p := range proctest.Below(os.Getpid()) {
		pids = append(pids, p.Pid)
	}
	browsers := len(proctest.Matching(marker))
	if browsers == 0 {
		t.Fatalf("no Chromium process has %s on its command line; the test cannot see them end", marker)
	}
	left := func() []proctest.Proc {
		procs := proctest.Running(pids, nil)
		for _, p := range proctest.Matching(marker) {
			if !slices.ContainsFunc(procs, func(q proctest.Proc) bool { return q.Pid == p.Pid }) {
				procs = append(procs, p)
			}
		}
		return procs
	}
	stopped := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for procs := left(); len(procs) > 0; procs = left() {
		if time.Now().After(deadline) {
			t.Fatalf("a minute after Close, %d of the server's processes are left: %+v", len(procs), procs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// --isolated: the profile (cookies, logins) went with the browser.
	// Chromium's singleton socket directory and Playwright's sockets
	// directory stay, empty of anything of the page's.
	if left, _ := filepath.Glob(filepath.Join(tmp, "playwright_chromiumdev_profile-*")); len(left) != 0 {
		t.Errorf("after Close, the browser's profile is left: %v", left)
	}
	t.Logf("the server's %d processes (%d of Chromium) ended %v after Close", len(pids), browsers, time.Since(stopped).Round(time.Millisecond))
}
