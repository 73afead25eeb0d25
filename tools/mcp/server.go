package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/tools"
)

// State is how a server is doing in this process.
type State int

// The states of a server.
const (
	// NotStarted: nothing has needed the server yet.
	NotStarted State = iota
	// Starting: the first connection is being made.
	Starting
	// Up: connected; its tools are offered.
	Up
	// Down: the connection failed or ended; it is retried with backoff.
	Down
)

func (s State) String() string {
	switch s {
	case NotStarted:
		return "not started"
	case Starting:
		return "starting"
	case Up:
		return "up"
	case Down:
		return "down"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Status is what /readyz and `bot tools` show of one server.
type Status struct {
	Name  string
	State State
	// Tools counts the tools the server offered when last listed.
	Tools int
	// Err says why the server is down, with the server's secrets hidden
	// (tools.Secrets.Redact): it never holds its environment or header
	// values, nor its URL's password, query or parts from ${VAR}.
	Err string
	// Endpoint is the server's URL or command, as it may be shown
	// (tools.MCPServer.Shown).
	Endpoint string
	// LeftOut are the tools the server lists but that are not offered,
	// and why, sorted by name.
	LeftOut []LeftOut
}

// LeftOut is a tool of a server that is not offered to the model.
type LeftOut struct {
	// Tool is the server's own name for it.
	Tool string
	// Why is said in a few words.
	Why string
}

// server is one configured MCP server: its connection, kept up by run,
// and its last tool list.
type server struct {
	cfg tools.MCPServer
	m   *Manager
	log logrus.FieldLogger

	firstTry chan struct{} // closed after the first connection attempt

	mu       sync.Mutex
	state    State
	err      error
	sess     *session
	tools    []*tool // last listed; kept while down, so calls get a clear error
	leftOut  []LeftOut
	canRead  bool // the server offers resources, and the read tool is offered
	inflight map[*inflight]struct{}
	up       chan struct{} // closed when a session begins, then made anew

	wire wireNotes // what is read off the wire (sniff.go)
}

// session is one connection to the server.
type session struct {
	cs   *sdk.ClientSession
	done chan struct{} // closed when the connection ends
}

func (s *session) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// inflight is a call being made, for elicitation to find whom to ask
// and progress to find its call.
type inflight struct {
	info  tools.CallInfo
	tool  string
	token string // its progress token
	dl    *callDeadline
}

func newServer(cfg tools.MCPServer, m *Manager) *server {
	return &server{
		cfg: cfg, m: m, log: m.log.WithField("mcp_server", cfg.Name),
		firstTry: make(chan struct{}), inflight: map[*inflight]struct{}{}, up: make(chan struct{}),
	}
}

// ErrUnavailable is wrapped by the error of a call to a server that is
// not connected.
var ErrUnavailable = errors.New("unavailable")

func (s *server) session() (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != nil && !s.sess.closed() {
		return s.sess, nil
	}
	why := "it has not started yet"
	switch {
	case s.err != nil:
		why = s.redact(s.err.Error())
	case s.sess != nil:
		why = "its connection just ended"
	}
	return nil, fmt.Errorf("MCP server %q is %w (%s); its tools cannot be called until it is back", s.cfg.Name, ErrUnavailable, why)
}

func (s *server) track(c *inflight) func() {
	s.mu.Lock()
	s.inflight[c] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.inflight, c)
		s.mu.Unlock()
	}
}

// readToolName is the name of the server's read tool, "" if it has none.
func (s *server) readToolName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.canRead {
		return ""
	}
	return ToolName(s.cfg.Name, ReadResourceTool)
}

func (s *server) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Name: s.cfg.Name, State: s.state, Tools: len(s.tools), Endpoint: s.cfg.Shown(), LeftOut: slices.Clone(s.leftOut)}
	if s.err != nil && s.state != Up {
		st.Err = s.redact(s.err.Error())
	}
	return st
}

// redact hides the server's secrets (tools.MCPServer.Secrets: its
// environment and header values, what came from ${VAR} in its command
// and URL, its URL's password and query) in text about it: its stderr,
// an error that quotes its URL. Whatever is shown of the server goes
// through it: Status.Err, the logs, the errors of its calls.
func (s *server) redact(text string) string {
	return s.cfg.Secrets.Redact(text)
}

// run keeps the server connected until ctx ends, retrying with backoff.
func (s *server) run(ctx context.Context) {
	backoff := s.m.opts.MinBackoff
	for {
		start := time.Now()
		err := s.connectAndServe(ctx)
		if ctx.Err() != nil {
			s.once()
			return
		}
		if time.Since(start) > s.m.opts.MaxBackoff {
			backoff = s.m.opts.MinBackoff // it was up a good while: retry soon
		}
		s.mu.Lock()
		s.state, s.err, s.sess = Down, err, nil
		s.mu.Unlock()
		s.m.rebuild()
		s.once()
		s.log.WithFields(logrus.Fields{"error": s.redact(err.Error()), "endpoint": s.cfg.Shown(), "retry_in": backoff}).Warn("MCP server is down; its tools are unavailable until it is back")
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, s.m.opts.MaxBackoff)
	}
}

// connectAndServe connects, lists the tools, and waits for the
// connection to end.
func (s *server) connectAndServe(ctx context.Context) (err error) {
	client := sdk.NewClient(&sdk.Implementation{Name: "countersign", Version: ClientVersion()}, &sdk.ClientOptions{
		// No roots: a server's own configuration says what it may touch.
		Capabilities:       &sdk.ClientCapabilities{},
		ElicitationHandler: s.elicit,
		// Input requests are answered by tool.send, or pause the run.
		MultiRoundTrip:              &sdk.MultiRoundTripOptions{Disabled: true},
		ProgressNotificationHandler: s.progress,
		// Deprecated by the newest protocol, and still what servers send.
		//lint:ignore SA1019 servers still send log notifications
		LoggingMessageHandler: s.logMessage,
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			s.m.goRefresh(s)
		},
	})
	var stderr tailBuffer
	var transport sdk.Transport
	if len(s.cfg.Command) > 0 {
		// The server never holds the bot's secrets, nor its privileges
		// over the bot: a short environment, and another account when
		// the bot is root; else the bot's /proc is closed to it.
		as, err := serverAccount(s.cfg)
		if err != nil {
			return err
		}
		if err := NonDumpable(); err != nil && as == nil {
			return fmt.Errorf("the bot cannot close its /proc entries to the server (prctl): %w", err)
		}
		cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
		// Never the bot's environment: serverEnv keeps only BaseEnv, LC_*,
		// the server's inherit_env (no secret of the bot's: refused at
		// start) and its own env:.
		cmd.Env = serverEnv(s.cfg, os.Environ(), as)
		runAs(cmd, as)
		// A working directory of its own, which goes with it.
		workIn, err := workParent(as)
		if err != nil {
			return fmt.Errorf("the server's working directory: %w", err)
		}
		cmd.Stderr = &stderr
		transport = sniffTransport{Transport: &stdioTransport{cmd: cmd, terminate: 2 * time.Second, skipped: s.skippedLines(), workIn: workIn}, w: &s.wire}
	} else if s.cfg.Transport == tools.MCPSSE {
		// The 2024-11-05 transport: the server names where to post in
		// the stream's first event, and only its own origin is taken.
		hc := s.httpClient()
		// What it answers a POST is read (session.go: ssePosts).
		hc.Transport = &sameOrigin{origin: origin(s.cfg.URL), server: s.cfg.Name, next: ssePosts{next: hc.Transport}}
		transport = &sdk.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc}
	} else {
		hc := s.httpClient()
		hc.Transport = &refusedPost{next: notePosts{next: sessionGone{next: hc.Transport}}}
		t := &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc, MaxRetries: s.m.opts.HTTPRetries}
		if err := s.authorize(t); err != nil {
			return err
		}
		transport = t
	}
	connectCtx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	cs, err := client.Connect(connectCtx, transport, nil)
	if err != nil {
		if t, ok := transport.(*sdk.SSEClientTransport); ok {
			if refused := t.HTTPClient.Transport.(*sameOrigin).refused.Load(); refused != nil {
				// The SDK may report only that the connection closed.
				err = *refused
			}
		}
		if t, ok := transport.(*sdk.StreamableClientTransport); ok && t.HTTPClient.Transport.(*refusedPost).refused.Load() {
			// What a server of the 2024-11-05 HTTP+SSE transport answers
			// a POST of initialize to its stream's URL.
			err = fmt.Errorf("%w (if it is a server of the older HTTP+SSE transport, set transport: sse)", err)
		}
		return startError(err, &stderr)
	}
	sess := &session{cs: cs, done: make(chan struct{})}
	go func() {
		select {
		case <-ctx.Done():
			_ = cs.Close()
		case <-sess.done:
		}
	}()
	defer func() { _ = cs.Close() }()
	if err := s.refresh(connectCtx, sess); err != nil {
		return startError(err, &stderr)
	}
	s.mu.Lock()
	s.setSessionLocked(sess)
	s.mu.Unlock()
	s.m.rebuild()
	s.log.WithField("tools", len(s.tools)).Info("MCP server connected")
	s.once()
	waitErr := cs.Wait()
	close(sess.done)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if waitErr == nil {
		waitErr = errors.New("the connection closed")
	}
	return startError(fmt.Errorf("connection lost: %w", waitErr), &stderr)
}

// once marks the first connection attempt as over.
func (s *server) once() {
	select {
	case <-s.firstTry:
	default:
		close(s.firstTry)
	}
}

// refresh lists the server's tools again.
func (s *server) refresh(ctx context.Context, sess *session) error {
	var list []*tool
	var left []LeftOut
	seen := map[string]string{}
	listed, err := s.listTools(ctx, sess.cs)
	if err != nil {
		return err
	}
	versions := map[string]string{} // by the server's name
	for _, t := range listed {
		if s.wire.exec.taskSupport(t.Name) == TaskRequired {
			// Offered, it would be approved and then fail: the SDK
			// cannot run a call as a task.
			left = append(left, LeftOut{Tool: t.Name, Why: "it runs only as a task (execution.taskSupport: required), which this client does not support"})
			s.log.WithField("tool", t.Name).Info("MCP tool left out: it runs only as a task")
			continue
		}
		mt, err := newTool(s, t)
		if err == nil {
			err = checkSchema(mt)
		}
		if err != nil {
			s.log.WithError(err).WithField("tool", t.Name).Warn("MCP tool left out")
			left = append(left, LeftOut{Tool: t.Name, Why: s.redact(err.Error())})
			continue
		}
		if v, again := versions[t.Name]; again && v == mt.ver {
			continue // the same tool on two pages
		}
		versions[t.Name] = mt.ver
		if other, dup := seen[mt.name]; dup {
			s.log.WithFields(logrus.Fields{"tool": t.Name, "other": other, "name": mt.name}).Warn("MCP tool left out: its name clashes with another's")
			left = append(left, LeftOut{Tool: t.Name, Why: fmt.Sprintf("its name %s clashes with that of %s", mt.name, other)})
			continue
		}
		seen[mt.name] = t.Name
		list = append(list, mt)
	}
	read := false
	if offersResources(sess.cs) {
		if other, dup := seen[ToolName(s.cfg.Name, ReadResourceTool)]; dup {
			s.log.WithField("tool", other).Warn("the server has a tool of the read tool's name: resources cannot be read")
		} else {
			list, read = append(list, readTool(s)), true
		}
	}
	slices.SortFunc(left, func(a, b LeftOut) int { return strings.Compare(a.Tool, b.Tool) })
	s.mu.Lock()
	s.tools, s.leftOut, s.canRead = list, left, read
	s.mu.Unlock()
	return nil
}

// maxToolPages bounds the pages of one listing of a server's tools.
const maxToolPages = 1000

// listTools lists the server's tools, page by page (nextCursor). A server
// that gives back a cursor it was already given (a bug in its paging)
// would be listed until the connection's time is up, at every connection,
// and then be down for no reason anyone could read: listing stops there,
// with what was listed, and the log says so; as it does after
// maxToolPages pages.
func (s *server) listTools(ctx context.Context, cs *sdk.ClientSession) ([]*sdk.Tool, error) {
	var out []*sdk.Tool
	sent := map[string]bool{}
	params := &sdk.ListToolsParams{}
	for page := 1; ; page++ {
		sent[params.Cursor] = true
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		out = append(out, res.Tools...)
		switch next := res.NextCursor; {
		case next == "":
			return out, nil
		case sent[next]:
			s.log.WithFields(logrus.Fields{"pages": page, "tools": len(out)}).Warn("MCP server gave a tools/list cursor it had been given before; listing stopped there")
			return out, nil
		case page >= maxToolPages:
			s.log.WithFields(logrus.Fields{"pages": page, "tools": len(out)}).Warn("MCP server's tool list goes on for too many pages; listing stopped there")
			return out, nil
		default:
			params = &sdk.ListToolsParams{Cursor: next}
		}
	}
}

// checkSchema compiles a tool's schema on its own, so that one tool with
// a schema the validator refuses does not take the others down with it.
func checkSchema(t *tool) error {
	_, err := tools.NewRegistry(tools.DefaultPolicy(), t)
	return err
}

// elicit asks the person behind the call for input. A server's request
// carries no reference to the call it is made for; with one call of the
// server in flight in this process, it is that call's; with several, it
// cannot be told whose it is, and it is cancelled.
func (s *server) elicit(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	s.mu.Lock()
	var calls []*inflight
	for c := range s.inflight {
		calls = append(calls, c)
	}
	s.mu.Unlock()
	el := s.m.elicitor()
	switch {
	case req.Params.Mode == "url":
		s.log.Info("elicitation by URL is not supported; declined")
		return &sdk.ElicitResult{Action: string(tools.ElicitDecline)}, nil
	case len(calls) != 1 || calls[0].info.Thread == "":
		s.log.WithField("calls", len(calls)).Warn("elicitation request without one call to attribute it to; cancelled")
		return &sdk.ElicitResult{Action: string(tools.ElicitCancel)}, nil
	case el == nil:
		s.log.Warn("elicitation request, but no front end can ask people; cancelled")
		return &sdk.ElicitResult{Action: string(tools.ElicitCancel)}, nil
	}
	c := calls[0]
	// The schema as the server wrote it: its properties in its order.
	schema, err := s.wire.forms.raw(req.Params.RequestedSchema)
	if err != nil || req.Params.RequestedSchema == nil {
		schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	ctx, cancel := context.WithDeadline(ctx, c.dl.deadline())
	defer cancel()
	ans, err := el.Elicit(ctx, tools.Elicitation{Call: c.info, Tool: c.tool, Message: req.Params.Message, Schema: schema})
	if err != nil {
		s.log.WithError(err).WithFields(logrus.Fields{"thread": c.info.Thread, "call": c.info.Call}).Info("elicitation got no answer; cancelled")
		return &sdk.ElicitResult{Action: string(tools.ElicitCancel)}, nil
	}
	return &sdk.ElicitResult{Action: string(ans.Action), Content: ans.Content}, nil
}

// startError adds the last line the server wrote to stderr, which
// usually says why it did not start.
func startError(err error, stderr *tailBuffer) error {
	if line := stderr.lastLine(); line != "" {
		return fmt.Errorf("%w (stderr: %s)", err, line)
	}
	return err
}

// tailBuffer keeps the end of what a server writes to stderr.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 2048

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > tailSize {
		b.buf = b.buf[len(b.buf)-tailSize:]
	}
	return len(p), nil
}

func (b *tailBuffer) lastLine() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := bytes.Split(bytes.TrimSpace(b.buf), []byte("\n"))
	line := strings.TrimSpace(string(lines[len(lines)-1]))
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}

// headers adds the configured headers to every request.
type headers struct {
	set  map[string]string
	next http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.set {
		r.Header.Set(k, v)
	}
	next := h.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// ErrOtherOrigin is wrapped by the error of a request an HTTP+SSE server
// would have the bot send elsewhere than its own origin.
var ErrOtherOrigin = errors.New("not the server's own origin")

// sameOrigin refuses requests to any origin but the server's: an
// HTTP+SSE server names, in its stream, the URL the bot posts its
// messages to, with the server's headers. A server (or whoever can
// change its stream) that named another host would have the bot send
// that host the server's token and every call's arguments; the reference
// clients refuse it too.
type sameOrigin struct {
	origin  string
	server  string
	next    http.RoundTripper
	refused atomic.Pointer[error] // the last request refused
}

func (o *sameOrigin) RoundTrip(r *http.Request) (*http.Response, error) {
	if got := origin(r.URL.String()); got != o.origin {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		err := fmt.Errorf("MCP server %q named %s to post its messages to: %w %s", o.server, got, ErrOtherOrigin, o.origin)
		o.refused.Store(&err)
		return nil, err
	}
	next := o.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// origin is the scheme, host and port of a URL (the port explicit), "" if
// it has none.
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// refusedPost notes whether a POST was answered 400, 404 or 405: how a
// server that does not speak streamable HTTP at that URL answers.
type refusedPost struct {
	next    http.RoundTripper
	refused atomic.Bool
}

func (p *refusedPost) RoundTrip(r *http.Request) (*http.Response, error) {
	next := p.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost {
		switch resp.StatusCode {
		case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed:
			p.refused.Store(true)
		}
	}
	return resp, err
}
