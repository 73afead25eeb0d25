package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/countersign/countersign/llm/llmtest"
)

// The browser tests run the bot as a newcomer does — no configuration at
// all — and use the playground page in headless Chromium the way a person
// would: type a request, press Enter, click the card's buttons, fill in
// the modals. The page, the simulated Slack and the real handlers are all
// in the bot process; the only other server is the target the agent's
// http_request calls reach.

// browserTimeout bounds one browser test from start to end.
const browserTimeout = 60 * time.Second

// chromiumHint says how to get the browser the tests drive.
const chromiumHint = "the browser tests drive headless Chromium: `make test` installs it when it runs as root " +
	"(apt-get install chromium); or install it yourself and set CHROMIUM_PATH if it is not /usr/bin/chromium"

// playgroundBot is the bot binary serving the playground.
type playgroundBot struct {
	url  string // http://127.0.0.1:port/
	open string // the URL it printed, with the page's access token
	cmd  *exec.Cmd
	logs *syncBuffer
}

// printedURL finds the URL in the line the playground prints at start.
var printedURL = regexp.MustCompile(`Countersign playground: open (http://\S+) in a browser\.\n`)

// startPlayground runs the bot with an empty environment but for PATH and
// BOT_ADDR, and waits until it answers /healthz and has printed the
// page's URL.
func startPlayground(t *testing.T, env ...string) *playgroundBot {
	t.Helper()
	addr := freeAddr(t)
	b := &playgroundBot{url: "http://" + addr + "/", logs: &syncBuffer{}}
	b.cmd = exec.Command(botBinary) // no arguments: what `go run ./cmd/bot` does
	b.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), goRace, "BOT_ADDR=" + addr, "LOG_FORMAT=json"}, env...)
	b.cmd.Stdout, b.cmd.Stderr = b.logs, b.logs
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = b.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("bot output:\n%s", b.logs.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := botClient.Get(b.url + "healthz")
		if err == nil {
			resp.Body.Close()
			if m := printedURL.FindStringSubmatch(b.logs.String()); resp.StatusCode == http.StatusOK && m != nil {
				b.open = m[1]
				return b
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the playground did not come up; output:\n%s", b.logs.String())
	return nil
}

// newBrowser starts headless Chromium for the test and returns its tab.
// When the test fails, a screenshot of the page is saved in the test's
// artifact directory (kept with go test -artifacts).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	needs(t, "Chromium")
	path := os.Getenv("CHROMIUM_PATH")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(path); err != nil {
		t.Fatalf("no Chromium at %s: %v\n%s", path, err, chromiumHint)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	)
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		if t.Failed() {
			screenshot(t, tab, "failure")
		}
		cancelTab()
		cancelAlloc()
		cancel()
	})
	// The first action starts the browser; it gets the tab's own context
	// so that no shorter deadline ends the browser.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("starting Chromium at %s: %v\n%s", path, err, chromiumHint)
	}
	return tab
}

// screenshot saves the page as a PNG in the test's artifact directory.
func screenshot(t *testing.T, tab context.Context, name string) {
	ctx, cancel := context.WithTimeout(tab, 5*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot: %s", path)
}

// page is the playground page in a browser tab, for one test.
type page struct {
	t   *testing.T
	tab context.Context
}

// do runs actions, failing the test with what was being done.
func (p page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.tab, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// open loads the page and waits until its event stream delivered the
// first snapshot.
// The URL's token does not stay in the address bar (nor in the history).
func (p page) open(url string) {
	p.t.Helper()
	p.do("opening the playground", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"] #composer-input`)))
	ctx, cancel := context.WithTimeout(p.tab, 5*time.Second)
	defer cancel()
	at, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		p.t.Fatalf("reading the page's address: %v", err)
	}
	if strings.Contains(at, "token") {
		p.t.Errorf("the page is at %s after opening %s; want the address without the token", at, url)
	}
}

// send types text into the channel's composer and presses Enter.
func (p page) send(text string) {
	p.t.Helper()
	p.do("typing "+text, chromedp.SendKeys(chromedp.ID("composer-input"), text+kb.Enter))
}

// actAs switches the person acting in the page.
func (p page) actAs(name string) {
	p.t.Helper()
	p.do("acting as "+name, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
			const s = document.getElementById('user-switch');
			const o = [...s.options].find((o) => o.text === %q);
			s.value = o.value;
			s.dispatchEvent(new Event('change'));
			return true;
		})()`, name))(ctx, t)
		return err
	}))
}

// In the XPaths below: the open thread, the open modal, and a rendered
// text.
const (
	inThread = `//aside[@id='thread' and not(@hidden)]`
	inModal  = `//form[@role='dialog']`
)

func button(scope, text string) string {
	return fmt.Sprintf(`%s//button[normalize-space()='%s']`, scope, text)
}

func textContaining(scope, text string) string {
	return fmt.Sprintf(`%s[contains(., '%s')]`, scope, text)
}

// click clicks a button by its text.
//
// The page re-renders a thread when a message of it arrives or changes,
// which can replace the button between finding it and clicking it; the
// click is then made again on the new button, as a person would.
func (p page) click(scope, text string) {
	p.t.Helper()
	sel := button(scope, text)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(p.tab, 20*time.Second)
		err := chromedp.Do(ctx, chromedp.WaitVisible(sel), chromedp.Click(sel, chromedp.NodeVisible))
		cancel()
		if err == nil {
			return
		}
		if attempt == 3 || !strings.Contains(err.Error(), "Could not find node") {
			p.t.Fatalf("clicking %s: %v", text, err)
		}
	}
}

// waitText waits until a text containing want is shown in scope.
func (p page) waitText(scope, want string) {
	p.t.Helper()
	p.do(fmt.Sprintf("waiting for %q", want), chromedp.WaitVisible(textContaining(scope, want)))
}

// threadText is the open thread's text.
func (p page) threadText() string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.tab, 5*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("thread-messages")))
	if err != nil {
		p.t.Fatalf("reading the thread: %v", err)
	}
	return text
}

// count counts the elements an XPath finds, without waiting.
func (p page) count(sel string) int {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.tab, 5*time.Second)
	defer cancel()
	nodes, err := chromedp.Run(ctx, chromedp.Nodes(sel, chromedp.AtLeast(0)))
	if err != nil {
		p.t.Fatalf("finding %s: %v", sel, err)
	}
	return len(nodes)
}

// setInput replaces the text of the modal's input.
// openModal clicks a card's button until the modal with input id opens.
// A modal needs the bot to answer within Slack's 3 seconds of the click
// (the trigger expires); on a loaded machine it may not, and a person
// then clicks again.
func (p page) openModal(button, id string) {
	p.t.Helper()
	for attempt := 1; ; attempt++ {
		p.click(inThread, button)
		ctx, cancel := context.WithTimeout(p.tab, 10*time.Second)
		err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID(id)))
		cancel()
		if err == nil {
			return
		}
		if attempt == 3 {
			p.t.Fatalf("clicking %s opened no modal: %v", button, err)
		}
	}
}

// badgeShown reports whether the page shows the DEMO badge.
func (p page) badgeShown() bool {
	p.t.Helper()
	p.do("waiting for the model's name", chromedp.WaitVisible(chromedp.ID("model-text")))
	ctx, cancel := context.WithTimeout(p.tab, 5*time.Second)
	defer cancel()
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const b = document.getElementById('model-badge'); return !b.hidden && getComputedStyle(b).display !== 'none'; })()`))
	if err != nil {
		p.t.Fatalf("reading the model badge: %v", err)
	}
	return shown
}

// With a real model the page says which, and shows no DEMO badge.
func TestPlaygroundModelBadge(t *testing.T) {
	t.Parallel()
	model := llmtest.NewOpenAIServer(t)
	bot := startPlayground(t, "LLM_PROVIDER=openai", "OPENAI_API_KEY=test-key", "OPENAI_BASE_URL="+model.URL())
	p := page{t: t, tab: newBrowser(t)}
	p.open(bot.open)
	p.waitText(`//*[@id="model-text"]`, "gpt-4o-mini")
	if p.badgeShown() {
		t.Error("the DEMO badge shows with a real model")
	}
}

func (p page) setInput(id, value string) {
	p.t.Helper()
	p.do("filling in "+id, chromedp.WaitVisible(chromedp.ID(id)), chromedp.SetValue(chromedp.ID(id), value))
}

func TestPlaygroundApproveInBrowser(t *testing.T) {
	t.Parallel()
	// The target answers with HTML, which the page must show as text.
	const body = `<img src=x onerror="document.title='pwned'"><b>not bold</b> & fine`
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/approve-me" {
			hits.Add(1)
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, body)
	}))
	defer target.Close()
	bot := startPlayground(t)
	p := page{t: t, tab: newBrowser(t)}

	p.open(bot.open)
	p.send("/agent fetch " + target.URL + "/approve-me")
	// The request's thread opens by itself, with the approval card in it.
	p.waitText(inThread, "Approval needed: http_request")
	p.waitText(inThread, target.URL+"/approve-me")
	if n := hits.Load(); n != 0 {
		t.Fatalf("the call ran %d times before anyone approved it", n)
	}
	if !p.badgeShown() {
		t.Error("the DEMO badge is hidden while the demo model answers")
	}
	// A decision made while the run that posted the card still holds the
	// thread is applied as soon as it lets go.
	p.click(inThread, "Approve")
	p.waitText(inThread, "Done: the request to "+target.URL+"/approve-me returned HTTP 200 OK")
	if n := hits.Load(); n != 1 {
		t.Errorf("the approved call ran %d times, want 1", n)
	}
	text := p.threadText()
	for _, want := range []string{"Approved by @You", body} {
		if !strings.Contains(text, want) {
			t.Errorf("the thread does not show %q:\n%s", want, text)
		}
	}
	if n := p.count(button(inThread, "Approve")); n != 0 {
		t.Errorf("the thread has %d Approve buttons after the approval, want 0:\n%s", n, text)
	}
	if n := p.count(inThread + "//img"); n != 0 {
		t.Errorf("the tool's HTML became %d img elements in the page", n)
	}
	screenshot(t, p.tab, "approved")
}

func TestPlaygroundEditAndRejectInBrowser(t *testing.T) {
	t.Parallel()
	target := newTarget(t)
	bot := startPlayground(t)
	p := page{t: t, tab: newBrowser(t)}
	p.open(bot.open)

	// Edit: a mistake first, shown in the modal, then the edited call.
	p.send("/agent fetch " + target.URL + "/original")
	p.waitText(inThread, "Approval needed: http_request")
	p.openModal("Edit", "input-args-args_input")
	p.setInput("input-args-args_input", `{"method": "GET", "url": `)
	p.click(inModal, "Approve")
	p.do("waiting for the modal's error", chromedp.WaitVisible(inModal+`//*[contains(@class,'field-error')][contains(., 'not valid JSON')]`))
	screenshot(t, p.tab, "edit-error")
	p.setInput("input-args-args_input", fmt.Sprintf(`{"method": "GET", "url": %q}`, target.URL+"/edited"))
	p.click(inModal, "Approve")
	p.do("waiting for the modal to close", chromedp.WaitNotPresent(inModal))
	p.waitText(inThread, "ok GET /edited")        // the tool's result
	p.waitText(inThread, "Done: the request to ") // the model's answer
	if got := p.threadText(); !strings.Contains(got, "Edited and approved by @You") {
		t.Errorf("the card does not say who edited it:\n%s", got)
	}
	if n, m := target.Count("GET /edited"), target.Count("GET /original"); n != 1 || m != 0 {
		t.Errorf("GET /edited ran %d times and GET /original %d times, want 1 and 0", n, m)
	}

	// Reject, by the teammate, with a reason.
	p.send("/agent fetch " + target.URL + "/rejected")
	p.waitText(inThread, target.URL+"/rejected")
	p.actAs("Teammate")
	p.openModal("Reject", "input-reason-reason_input")
	p.setInput("input-reason-reason_input", "not today")
	p.click(inModal, "Reject")
	p.do("waiting for the modal to close", chromedp.WaitNotPresent(inModal))
	// The answer streams in word by word: wait for its end.
	p.waitText(inThread, "Rejected by user U0TEAMMATE: not today")
	got := p.threadText()
	// The card names the teammate with a live mention; the model's answer
	// quotes the result, which names people in plain words, never in
	// Slack's markup.
	for _, want := range []string{"Rejected by user U0TEAMMATE: not today", "🚫 Rejected by @Teammate"} {
		if !strings.Contains(got, want) {
			t.Errorf("the thread does not show %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "<@U0TEAMMATE>") {
		t.Errorf("the thread shows raw Slack markup:\n%s", got)
	}
	if n := target.Count("GET /rejected"); n != 0 {
		t.Errorf("the rejected call ran %d times", n)
	}
	screenshot(t, p.tab, "rejected")
}

// A policy with decisions: [approve, reject] and confirm: true: the
// playground's card has no Edit button, and Approve asks first, in a
// dialog like Slack's; Cancel changes nothing.
func TestPlaygroundConfirmAndNoEditInBrowser(t *testing.T) {
	t.Parallel()
	target := newTarget(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("tools:\n  http_request:\n    decisions: [approve, reject]\n    confirm: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bot := startPlayground(t, "BOT_POLICY="+policy)
	p := page{t: t, tab: newBrowser(t)}
	p.open(bot.open)
	p.send("/agent fetch " + target.URL + "/confirmed")
	p.waitText(inThread, "Approval needed: http_request")
	if n := p.count(button(inThread, "Edit")); n != 0 {
		t.Errorf("the card has %d Edit buttons, want none:\n%s", n, p.threadText())
	}
	const dialog = `//div[@role='alertdialog']`
	p.click(inThread, "Approve")
	p.waitText(dialog, "Approve http_request?")
	p.waitText(dialog, "http_request will run: GET "+target.URL+"/confirmed")
	screenshot(t, p.tab, "confirm")
	p.click(dialog, "Cancel")
	p.do("waiting for the dialog to close", chromedp.WaitNotPresent(dialog))
	if n := target.Count("GET /confirmed"); n != 0 {
		t.Fatalf("the call ran %d times after Cancel", n)
	}
	p.click(inThread, "Approve")
	p.click(dialog, "Approve")
	p.waitText(inThread, "Done: the request to "+target.URL+"/confirmed")
	if n := target.Count("GET /confirmed"); n != 1 {
		t.Errorf("the approved call ran %d times, want 1", n)
	}
}

// restart stops the bot and starts it again on the same address, as a
// person restarting `go run ./cmd/bot` does, and waits until it answers
// and has printed its new URL.
func (b *playgroundBot) restart(t *testing.T) {
	t.Helper()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Wait()
	printed := len(printedURL.FindAllString(b.logs.String(), -1))
	env := b.cmd.Env
	b.cmd = exec.Command(botBinary)
	b.cmd.Env = env
	b.cmd.Stdout, b.cmd.Stderr = b.logs, b.logs
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := botClient.Get(b.url + "healthz")
		if err == nil {
			resp.Body.Close()
			if m := printedURL.FindAllStringSubmatch(b.logs.String(), -1); resp.StatusCode == http.StatusOK && len(m) > printed {
				b.open = m[len(m)-1][1]
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the playground did not come back; output:\n%s", b.logs.String())
}

// The page shows its people's user IDs, which a policy's approvers:
// needs, and a tab left open across a restart says to open the URL the
// bot printed again instead of reconnecting forever (a reload, or the old
// URL, is refused: the restarted bot has a new token); that URL brings
// it back.
func TestPlaygroundPeopleAndStaleTab(t *testing.T) {
	t.Parallel()
	bot := startPlayground(t)
	p := page{t: t, tab: newBrowser(t)}
	p.open(bot.open)
	p.waitText(`//*[@id="sidebar-people"]`, "Teammate U0TEAMMATE")
	p.waitText(`//*[@id="sidebar-people"]`, "You U0YOU")
	p.waitText(`//*[@id="acting-id"]`, "U0YOU")
	p.actAs("Teammate")
	p.waitText(`//*[@id="acting-id"]`, "U0TEAMMATE")

	old := bot.open
	bot.restart(t)
	if bot.open == old {
		t.Fatalf("the restarted playground printed its old URL %s; want a new token", old)
	}
	p.waitText(`//*[@id="connection"]`, "open the URL it printed when it started again")
	// A reload, or the old URL, is refused: the token in the tab's cookie
	// and in the old URL belong to the old bot.
	for _, url := range []string{bot.url, old} {
		p.do("opening "+url, chromedp.Navigate(url))
		p.waitText(`//body`, "the URL the bot printed")
	}
	p.open(bot.open)
	p.send("/agent hello")
	p.waitText(`//*[@id="messages"]`, "hello")
}
