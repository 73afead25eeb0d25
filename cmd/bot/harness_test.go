package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testtarget"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// The tests in this package run the real bot binary as a subprocess, as
// an operator would, against a real Redis, the Slack Web API fake and a
// model fake that speaks OpenAI's wire protocol. They talk to it only
// through the contracts of docs/architecture.md (Contracts): environment
// variables, signed HTTP requests, and the Web API calls it makes.

// raceBuild is set when the tests run with -race; the binary is then
// built with the race detector too.
var raceBuild bool

var botBinary string

// goRace is the GORACE entry of the environment of every bot process the
// tests start. A program built with -race sleeps a second as it exits
// (the race detector's atexit_sleep_ms) for goroutines still running to
// show a race; races are reported when they happen all the same, and the
// tests stop a bot or run one of its commands a few hundred times, each
// of which would wait that second out. A GORACE of the caller's own comes
// after, and so has the last word.
var goRace = "GORACE=" + os.Getenv("GORACE")

func TestMain(m *testing.M) {
	if raceBuild {
		value := strings.TrimSpace("atexit_sleep_ms=0 " + os.Getenv("GORACE"))
		goRace = "GORACE=" + value
		// For the bots started with the tests' own environment (the MCP
		// conformance suite runs the bot itself).
		os.Setenv("GORACE", value)
	}
	dir, err := os.MkdirTemp("", "bot-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	botBinary = filepath.Join(dir, "bot")
	args := []string{"build", "-o", botBinary}
	if raceBuild {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the bot:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const (
	signingSecret = "test-signing-secret"
	botToken      = "xoxb-test-token"
	requester     = "U0ALICE"
	approver      = "U0BOB"
)

// harness is one bot process and the world around it.
type harness struct {
	t      testing.TB
	slack  *slacktest.Server
	model  *llmtest.OpenAIServer
	redis  *redistest.Server
	target *target
	signer slacktest.Signer
	addr   string
	env    []string
	bot    *exec.Cmd
	logs   *syncBuffer
	// cred, if set, is the account the bot runs as (from "/").
	cred *syscall.Credential
}

func newHarness(t testing.TB, policy string, replies ...llm.Message) *harness {
	t.Helper()
	h := newIdleHarness(t, policy, replies...)
	h.start()
	return h
}

// useAnthropic points the bot of an idle harness at a fake Anthropic
// API that answers with script, instead of the OpenAI fake.
func (h *harness) useAnthropic(script ...llm.Message) *llmtest.AnthropicServer {
	h.t.Helper()
	a := llmtest.NewAnthropicServer(h.t, script...)
	h.env = append(h.env, "LLM_PROVIDER=anthropic", "ANTHROPIC_API_KEY=test-key", "ANTHROPIC_BASE_URL="+a.URL())
	return a
}

// newIdleHarness is newHarness without starting the bot.
func newIdleHarness(t testing.TB, policy string, replies ...llm.Message) *harness {
	t.Helper()
	needs(t, "a redis-server process for the bot binary")
	h := &harness{
		t:      t,
		slack:  slacktest.NewServer(t),
		model:  llmtest.NewOpenAIServer(t, replies...),
		redis:  redistest.StartServer(t),
		target: newTarget(t),
		signer: slacktest.NewSigner(signingSecret),
		addr:   freeAddr(t),
		logs:   &syncBuffer{},
	}
	h.env = []string{
		"PATH=" + os.Getenv("PATH"),
		goRace,
		"SLACK_BOT_TOKEN=" + botToken,
		"SLACK_SIGNING_SECRET=" + signingSecret,
		"SLACK_API_URL=" + h.slack.URL(),
		"REDIS_URL=redis://" + h.redis.Addr() + "/0",
		"LLM_PROVIDER=openai",
		"OPENAI_API_KEY=test-key",
		"OPENAI_BASE_URL=" + h.model.URL(),
		"BOT_ADDR=" + h.addr,
		"LOG_FORMAT=json",
		"LOG_LEVEL=debug",
	}
	if policy != "" {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
		h.env = append(h.env, "BOT_POLICY="+path)
	}
	t.Cleanup(func() {
		h.stop()
		if t.Failed() {
			t.Logf("bot logs:\n%s", h.logs.String())
		}
	})
	return h
}

// startupLine begins the line serve logs once it is wired, just before
// it answers requests.
const startupLine = "Countersign serving Slack"

// start runs the bot and waits until it answers /readyz and its start-up
// line is in h.logs. The bot answers /healthz before it is wired (and
// while it waits for Redis), and /readyz the instant it is, before the
// line has crossed the pipe.
func (h *harness) start() {
	h.t.Helper()
	started := strings.Count(h.logs.String(), startupLine)
	h.launch()
	deadline := time.Now().Add(stateWait)
	for time.Now().Before(deadline) {
		resp, err := botClient.Get("http://" + h.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (!h.logsInfo() || strings.Count(h.logs.String(), startupLine) > started) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("the bot did not come up; logs:\n%s", h.logs.String())
}

// launch runs the bot, without waiting for anything.
func (h *harness) launch() {
	h.t.Helper()
	h.bot = exec.Command(botBinary)
	h.bot.Env = h.env
	h.bot.Stdout, h.bot.Stderr = h.logs, h.logs
	if h.cred != nil {
		h.bot.SysProcAttr = &syscall.SysProcAttr{Credential: h.cred}
		h.bot.Dir = "/"
	}
	if err := h.bot.Start(); err != nil {
		h.t.Fatal(err)
	}
}

// logsInfo reports whether the bot logs info lines (its start-up line
// among them): the last LOG_LEVEL of its environment is info or debug.
func (h *harness) logsInfo() bool {
	level := "info"
	for _, kv := range h.env {
		if v, ok := strings.CutPrefix(kv, "LOG_LEVEL="); ok {
			level = v
		}
	}
	return level == "info" || level == "debug" || level == "trace"
}

// kill ends the bot with SIGKILL, as a crash would.
func (h *harness) kill() {
	h.t.Helper()
	_ = h.bot.Process.Signal(syscall.SIGKILL)
	_ = h.bot.Wait()
	h.bot = nil
}

func (h *harness) stop() {
	if h.bot == nil {
		return
	}
	_ = h.bot.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = h.bot.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = h.bot.Process.Kill()
		<-done
	}
	h.bot = nil
}

// botClient sends the tests' requests to the bot, with a transport of
// its own: httptest.Server.Close closes the idle connections of
// http.DefaultTransport, and a POST that took one of them at that moment
// fails ("CloseIdleConnections called") rather than being sent again.
// The tests run in parallel, each closing its fakes' servers.
var botClient = &http.Client{Transport: &http.Transport{}}

// send posts a signed request to the bot.
func (h *harness) send(path, contentType string, body []byte, header http.Header) *http.Response {
	h.t.Helper()
	req := h.signer.Request(http.MethodPost, "http://"+h.addr+path, contentType, body, time.Now())
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := botClient.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

// command sends "/agent text" from the requester, with form overrides.
func (h *harness) command(text string, form url.Values, header http.Header) *http.Response {
	h.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("text", text)
	if form.Get("user_id") == "" {
		form.Set("user_id", requester)
	}
	return h.send("/slack/commands", "application/x-www-form-urlencoded", slacktest.SlashCommand(form), header)
}

// click presses a button on a card.
func (h *harness) click(card slacktest.Call, actionID, user string) *http.Response {
	h.t.Helper()
	body := slacktest.BlockActions(slacktest.Click{
		User: user, Channel: card.Channel, MessageTS: card.TS, ThreadTS: card.ThreadTS,
		ActionID: actionID, Value: buttonValue(h.t, card, actionID),
	})
	return h.send("/slack/interactions", "application/x-www-form-urlencoded", body, nil)
}

// submit submits a modal.
func (h *harness) submit(s slacktest.Submission) *http.Response {
	h.t.Helper()
	return h.send("/slack/interactions", "application/x-www-form-urlencoded", slacktest.ViewSubmission(s), nil)
}

// event sends an Events API event.
func (h *harness) event(eventID string, ev map[string]any) *http.Response {
	h.t.Helper()
	return h.send("/slack/events", "application/json", slacktest.EventCallback(eventID, ev), nil)
}

// deployFlow scripts the model to ask for one call, POST /deploy, and to
// answer with answer once it has the result; it sends "/agent deploy"
// and returns the root message and the call's approval card.
func (h *harness) deployFlow(answer string) (root, card slacktest.Call) {
	h.t.Helper()
	h.model.Then(
		llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply(answer),
	)
	h.command("deploy", nil, nil)
	root = h.root(1)
	return root, h.cards(root, 1)[0]
}

// root waits for the n-th root message ("<@U…> asked: …") and returns it.
func (h *harness) root(n int) slacktest.Call {
	h.t.Helper()
	var roots []slacktest.Call
	h.eventually(func() bool {
		roots = h.roots()
		return len(roots) >= n
	}, "root message %d", n)
	return roots[n-1]
}

// roots returns the root messages ("<@U…> asked: …") posted so far.
func (h *harness) roots() []slacktest.Call {
	var roots []slacktest.Call
	for _, c := range h.slack.CallsTo("chat.postMessage") {
		if c.OK() && c.ThreadTS == "" && strings.Contains(c.Text, "asked:") {
			roots = append(roots, c)
		}
	}
	return roots
}

// cards waits until thread has at least n approval cards, and returns them.
func (h *harness) cards(root slacktest.Call, n int) []slacktest.Call {
	h.t.Helper()
	var cards []slacktest.Call
	h.eventually(func() bool {
		cards = nil
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if hasAction(c, "approve") || hasAction(c, "retry") {
				cards = append(cards, c)
			}
		}
		return len(cards) >= n
	}, "%d approval cards", n)
	return cards
}

// cardWith waits, up to within, for a message in root's thread with a
// button actionID, and returns its latest content.
func (h *harness) cardWith(root slacktest.Call, actionID string, within time.Duration) slacktest.Call {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if hasAction(c, actionID) {
				return c
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("timed out waiting for a card with a %s button", actionID)
	return slacktest.Call{}
}

// reply waits for a thread message whose text contains want.
func (h *harness) reply(root slacktest.Call, want string) slacktest.Call {
	h.t.Helper()
	var found slacktest.Call
	h.eventually(func() bool {
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if strings.Contains(c.Text, want) {
				found = c
				return true
			}
		}
		return false
	}, "a reply containing %q", want)
	return found
}

// card returns a card's latest content, after updates: its text and its
// blocks' JSON with <, > and & as they are.
func (h *harness) card(card slacktest.Call) string {
	c, _ := h.slack.Message(card.Channel, card.TS)
	var blocks any
	_ = json.Unmarshal(c.Blocks, &blocks)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(blocks)
	return c.Text + " " + b.String()
}

// ephemeral waits for an ephemeral message to user containing want.
func (h *harness) ephemeral(user, want string) {
	h.t.Helper()
	h.eventually(func() bool {
		for _, c := range h.slack.CallsTo("chat.postEphemeral") {
			if c.User == user && strings.Contains(c.Text, want) {
				return true
			}
		}
		return false
	}, "an ephemeral message to %s containing %q", user, want)
}

// stateWait is how long eventually waits for a state before it fails the
// test: a safety net, not a bound on how soon the bot must get there. A
// state that comes in a second on a quiet machine takes tens of them on
// a loaded one (a 10 MB tool result through two programs built with
// -race took 28 s beside seven other tests and another build), and a
// test that passes does not wait any longer for it being generous.
const stateWait = 60 * time.Second

func (h *harness) eventually(cond func() bool, format string, args ...any) {
	h.t.Helper()
	deadline := time.Now().Add(stateWait)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("timed out waiting for "+format, args...)
}

// buttonValue finds the value of the button with actionID on a card.
func buttonValue(t testing.TB, card slacktest.Call, actionID string) string {
	t.Helper()
	v, ok := card.ButtonValue(actionID)
	if !ok {
		t.Fatalf("no %q button on the card: %s", actionID, card.Blocks)
	}
	return v
}

func hasAction(c slacktest.Call, actionID string) bool {
	return bytes.Contains(c.Blocks, []byte(`"action_id":"`+actionID+`"`))
}

// target is the server the agent's http_request calls reach.
type target = testtarget.Server

func newTarget(t testing.TB) *target { return testtarget.New(t) }

// call is a model tool call to http_request.
func call(id, method, url, body string) llm.ToolCall {
	args, _ := json.Marshal(map[string]string{"method": method, "url": url, "body": body})
	if body == "" {
		args, _ = json.Marshal(map[string]string{"method": method, "url": url})
	}
	return llm.ToolCall{ID: id, Name: "http_request", Arguments: string(args)}
}

// freeAddr returns a loopback address nothing listened on a moment ago,
// for a bot to listen on. Its port is below the kernel's range of
// ephemeral ports (32768 and up on Linux, 49152 on macOS), where no
// server on port 0 and no outgoing connection of another test takes it
// before the bot does, and no two calls in the test process return the
// same one: the ports are handed out in turn from a random start.
func freeAddr(t testing.TB) string {
	t.Helper()
	for range botPorts {
		port := botPortsFrom + int(nextBotPort.Add(1))%botPorts
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken by another process
		}
		ln.Close()
		return addr
	}
	t.Fatalf("no free loopback port in %d–%d", botPortsFrom, botPortsFrom+botPorts-1)
	return ""
}

// The ports freeAddr hands out.
const botPortsFrom, botPorts = 20000, 12000

var nextBotPort = func() *atomic.Int64 {
	var n atomic.Int64
	n.Store(rand.Int64N(botPorts))
	return &n
}()

// syncBuffer collects the bot's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// openedView is what the tests read of a views.open call.
type openedView struct {
	CallbackID, PrivateMetadata string
	// Input is the initial value of the modal's text input.
	Input string
}

func decodeView(t *testing.T, c slacktest.Call) openedView {
	t.Helper()
	var v struct {
		CallbackID      string `json:"callback_id"`
		PrivateMetadata string `json:"private_metadata"`
		Blocks          []struct {
			Element struct {
				InitialValue string `json:"initial_value"`
			} `json:"element"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal([]byte(c.Params["view"]), &v); err != nil {
		t.Fatalf("views.open view: %v (%q)", err, c.Params["view"])
	}
	out := openedView{CallbackID: v.CallbackID, PrivateMetadata: v.PrivateMetadata}
	for _, b := range v.Blocks {
		if b.Element.InitialValue != "" {
			out.Input = b.Element.InitialValue
		}
	}
	return out
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Flags of the load generator (BenchmarkSlackAck).
var (
	ackRate    = flag.Int("ack.rate", 200, "requests per second that BenchmarkSlackAck sends")
	ackSeconds = flag.Int("ack.seconds", 10, "for how many seconds BenchmarkSlackAck sends")
)
