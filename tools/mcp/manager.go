// Package mcp offers the tools of MCP servers to the agent, behind the
// same approvals as the built-in tools. The servers are those of the
// policy file's mcp_servers: section (tools.MCPServer); the client is the
// official Go SDK.
//
// A Manager is the agent's toolbox: the built-in tools and the tools of
// every server that answers, each server's tools named <server>__<tool>
// (see ToolName). A server is started (stdio) or connected to (HTTP:
// streamable HTTP, or with transport: sse the 2024-11-05 HTTP+SSE
// transport, whose message endpoint must be on the server's own origin)
// the first time the tools are needed in a process, not at start-up; when
// it dies or the connection drops, it is restarted with backoff (1s,
// doubling, up to a minute), and its tools are not offered meanwhile: a
// call to one of them is refused before any card (the tools are
// tools.Checkers), and one already approved gets an error result; both
// say that the server is unavailable and why. The tool list is kept and listed again when the server
// says it changed (notifications/tools/list_changed). Close stops every
// server.
//
// Every call carries an idempotency key in its request's _meta
// (IdempotencyKeyMeta), the same for one attempt of one call. A call
// whose server dies during it gives tools.ErrOutcomeUnknown, so that the
// agent asks a person what happened unless the tool is idempotent; only
// a server with trust_annotations: true can say a tool is (readOnlyHint
// or idempotentHint).
//
// A server's request for input during a call (elicitation/create, form
// mode) goes to the Elicitor, which asks the person who asked for the
// run; no answer within the call's timeout cancels it. An "input
// required" result (the newest protocol) is not answered by the SDK: when
// the run can pause, the call returns the questions and the server's
// state (tools.InputRequiredError) and is sent again with the answers
// later, from any replica; otherwise the Elicitor is asked and the call
// sent again at once (input.go).
// The request is attributed to the one call of that server in flight in
// this process; when several are, it is cancelled rather than shown to
// someone who may not be the right person. URL-mode requests are
// declined. Its schema reaches the Elicitor as the server wrote it, so
// that the form keeps the server's order (sniff.go).
//
// A tool that runs only as a task (execution.taskSupport: required) is
// not offered (Status.LeftOut says so). Every call asks for progress:
// progress gives the call more time, up to MaxCall, and goes to the
// ProgressReporter (progress.go). Log notifications go to the log, never
// to the model. A server with resources has a read tool,
// <server>__read_resource (resources.go).
//
// A stdio server never holds the bot's secrets nor its privileges over
// the bot: it starts with BaseEnv, its inherit_env and its env only; when
// the bot runs as root, as nobody or its entry's user, in a home of its
// own; otherwise after the bot made itself non-dumpable (NonDumpable),
// so that the server cannot read the bot's /proc entries. A tool's
// result is cut to Options.MaxResult.
//
// The package does not decide approvals or run calls by itself: the agent
// does, through the Manager.
package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/tools"
)

// Options are a Manager's optional settings.
type Options struct {
	// Logger defaults to a logger that discards.
	Logger logrus.FieldLogger
	// StartWait bounds how long the first request for the tool list
	// waits for the servers to answer (default 60s). Servers that have
	// not answered by then are left out until they do.
	StartWait time.Duration
	// ConnectTimeout bounds one connection attempt, the first listing of
	// tools included (default 60s: npx may have to download a server).
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between two connection
	// attempts (default 1s and 1m).
	MinBackoff, MaxBackoff time.Duration
	// HTTPClient is used for HTTP servers (default http.DefaultClient).
	HTTPClient *http.Client
	// HTTPRetries is how often the SDK tries to resume an HTTP session
	// whose stream broke before the session counts as lost and a new one
	// is made (0: the SDK's default, 5; negative: none).
	HTTPRetries int
	// Elicitor asks people for input; see also SetElicitor.
	Elicitor tools.Elicitor
	// MaxResult is how many bytes of a tool's result, all its parts
	// together, the model is given and a checkpoint keeps (default
	// DefaultMaxResult); the rest is left out with a note of its size.
	MaxResult int
}

// DefaultMaxResult bounds a tool's result when Options do not say.
const DefaultMaxResult = 16 << 10

// Manager is the agent's toolbox: built-in tools and MCP servers' tools.
// It is safe for concurrent use.
//
// Goroutines. Start (or the first Tools, Lookup or Wait) starts one
// goroutine per server, which connects, lists its tools, waits for the
// connection to end and reconnects with backoff until Close; the MCP SDK
// runs a server's requests to the bot (an elicitation, a tools/list_changed
// notice) on goroutines of its own, and a list change lists the tools
// again on another goroutine of the Manager's. Close ends them all and
// waits for them; call it once, when no thread runs.
//
// Callers. The agent calls Tools, Lookup and Validate, and the tools'
// Call, from the goroutines of the threads it runs, any number at once;
// front ends and operator commands call Status, Describe and Lookup from
// theirs. The tool list is swapped whole (an atomic pointer), so a caller
// sees the list before or after a server's change, never a mix; a tool
// looked up before its server went down fails its call with an error.
//
// Blocking. Tools, Lookup and Wait wait for the servers' first try, at
// most Options.StartWait, once; afterwards they do not block. A tool's
// call blocks until its server answers or its timeout ends; an
// elicitation during a call blocks that call until the person answers or
// the call's deadline passes. SetElicitor may be called at any time.
type Manager struct {
	policy   *tools.Policy
	builtins []tools.Tool
	servers  []*server
	opts     Options
	log      logrus.FieldLogger

	reg   atomic.Pointer[tools.Registry]
	elic  atomic.Pointer[tools.Elicitor]
	prog  atomic.Pointer[ProgressReporter]
	oauth oauthHooks

	startOnce sync.Once
	tried     atomic.Bool // every server has been tried once
	rebuildMu sync.Mutex
	// clashes are, by server, its tools left out because another
	// server's tool (or a built-in) has the same name (rebuild).
	clashes atomic.Pointer[map[string][]LeftOut]
	ctx     context.Context // ends at Close; the servers' lifetime
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New returns a Manager for the policy's MCP servers beside builtins. It
// starts nothing: servers start when the tools are first needed. It
// fails for what tools.NewRegistry refuses in the policy and builtins.
func New(policy *tools.Policy, builtins []tools.Tool, opts Options) (*Manager, error) {
	if policy == nil {
		policy = tools.DefaultPolicy()
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.Out = discard{}
		opts.Logger = l
	}
	if opts.StartWait <= 0 {
		opts.StartWait = 60 * time.Second
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 60 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = time.Second
	}
	if opts.MaxResult <= 0 {
		opts.MaxResult = DefaultMaxResult
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(time.Minute, opts.MinBackoff)
	}
	reg, err := tools.NewRegistry(policy, builtins...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{policy: policy, builtins: builtins, opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel}
	m.reg.Store(reg)
	if opts.Elicitor != nil {
		m.SetElicitor(opts.Elicitor)
	}
	names := make([]string, 0, len(policy.MCPServers))
	for name := range policy.MCPServers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		m.servers = append(m.servers, newServer(policy.MCPServers[name], m))
	}
	return m, nil
}

// SetElicitor sets who asks people for input, for front ends that are
// built after the Manager.
func (m *Manager) SetElicitor(e tools.Elicitor) { m.elic.Store(&e) }

// SetProgressReporter sets who shows people the progress of calls.
func (m *Manager) SetProgressReporter(p ProgressReporter) { m.prog.Store(&p) }

func (m *Manager) progressReporter() ProgressReporter {
	if p := m.prog.Load(); p != nil {
		return *p
	}
	return nil
}

func (m *Manager) elicitor() tools.Elicitor {
	if e := m.elic.Load(); e != nil {
		return *e
	}
	return nil
}

// Start starts every server in the background, if not done already.
func (m *Manager) Start() {
	m.startOnce.Do(func() {
		for _, s := range m.servers {
			s.mu.Lock()
			s.state = Starting
			s.mu.Unlock()
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				s.run(m.ctx)
			}()
		}
	})
}

// Wait starts the servers and waits until each has been tried once, or
// ctx ends.
func (m *Manager) Wait(ctx context.Context) {
	m.Start()
	for _, s := range m.servers {
		select {
		case <-s.firstTry:
		case <-ctx.Done():
			return
		}
	}
}

// Close stops every server and waits for them.
func (m *Manager) Close() error {
	m.cancel()
	m.wg.Wait()
	return nil
}

// Tools returns the tools offered to the model: the built-in ones and
// those of the servers that are up, sorted by name. The first call
// starts the servers and waits for them (Options.StartWait).
func (m *Manager) Tools() []tools.Tool {
	m.waitStarted()
	var down map[string]bool // made only when a server is down: this runs at every model call
	for _, s := range m.servers {
		if s.status().State != Up {
			if down == nil {
				down = map[string]bool{}
			}
			down[s.cfg.Name] = true
		}
	}
	out := m.reg.Load().Tools() // a copy of our own
	if down == nil {
		return out
	}
	return slices.DeleteFunc(out, func(t tools.Tool) bool {
		ot, ok := t.(tools.OriginTool)
		return ok && down[ot.Origin().Server]
	})
}

// waitStarted starts the servers and waits for each to be tried once,
// at most Options.StartWait; after that it returns at once, without a
// timer: it runs for every tool lookup.
func (m *Manager) waitStarted() {
	if m.tried.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.opts.StartWait)
	m.Wait(ctx)
	cancel()
	for _, s := range m.servers {
		select {
		case <-s.firstTry:
		default:
			return
		}
	}
	m.tried.Store(true)
}

// FixedTools returns the built-in tools offered, without starting or
// waiting for any server: what the agent's graph fingerprint covers.
// MCP tools change with their servers and are checked call by call.
func (m *Manager) FixedTools() []tools.Tool {
	var out []tools.Tool
	for _, t := range m.reg.Load().Tools() {
		if _, ok := t.(tools.OriginTool); !ok {
			out = append(out, t)
		}
	}
	return out
}

// Lookup returns a tool and its rule, whether its server is up or not (a
// call to a server that is down fails with a clear error). Like Tools,
// the first call waits for the servers to start.
func (m *Manager) Lookup(name string) (tools.Tool, tools.Rule, bool) {
	m.waitStarted()
	return m.reg.Load().Lookup(name)
}

// Validate checks arguments against the tool's input schema.
func (m *Manager) Validate(name string, args json.RawMessage) error {
	m.waitStarted()
	return m.reg.Load().Validate(name, args)
}

// ToolTimeout is the longest a server's call may last (its timeout,
// pushed back by progress up to MaxCall), or fallback if
// that is longer: what the agent should allow one call, so that a
// server's own timeout is the one that ends its calls.
func (m *Manager) ToolTimeout(fallback time.Duration) time.Duration {
	d := fallback
	for _, s := range m.servers {
		d = max(d, MaxCall(s.cfg.Timeout)+5*time.Second)
		if s.cfg.Auth == tools.AuthRequester {
			d = max(d, MaxCall(s.cfg.Timeout)+ConnectWait+5*time.Second)
		}
	}
	return d
}

// Status reports every server, sorted by name.
func (m *Manager) Status() []Status {
	out := make([]Status, 0, len(m.servers))
	var clashes map[string][]LeftOut
	if c := m.clashes.Load(); c != nil {
		clashes = *c
	}
	for _, s := range m.servers {
		st := s.status()
		if c := clashes[st.Name]; len(c) > 0 {
			st.LeftOut = append(st.LeftOut, c...)
			slices.SortFunc(st.LeftOut, func(a, b LeftOut) int { return strings.Compare(a.Tool, b.Tool) })
		}
		out = append(out, st)
	}
	return out
}

// Describe writes one line per server for /readyz: "mcp NAME: up (N
// tools)" or "mcp NAME: down: why", and under it one line per tool the
// server lists but that is not offered: "  left out TOOL: why".
func (m *Manager) Describe() string {
	var sb strings.Builder
	for _, st := range m.Status() {
		fmt.Fprintf(&sb, "mcp %s: %s", st.Name, st.State)
		if st.State == Up {
			fmt.Fprintf(&sb, " (%d tools)", st.Tools)
		}
		if st.Err != "" {
			fmt.Fprintf(&sb, ": %s", st.Err)
		}
		sb.WriteByte('\n')
		for _, l := range st.LeftOut {
			fmt.Fprintf(&sb, "  left out %s: %s\n", strconv.QuoteToGraphic(l.Tool), l.Why)
		}
	}
	return sb.String()
}

// rebuild makes a new registry of the built-ins and every server's last
// tool list.
func (m *Manager) rebuild() {
	m.rebuildMu.Lock()
	defer m.rebuildMu.Unlock()
	all := slices.Clone(m.builtins)
	have := map[string]bool{}
	owners := map[string][]*tool{} // by offered name
	for _, s := range m.servers {
		s.mu.Lock()
		for _, t := range s.tools {
			owners[t.name] = append(owners[t.name], t)
			have[t.name] = true
		}
		s.mu.Unlock()
	}
	builtin := map[string]bool{}
	for _, t := range m.builtins {
		builtin[t.Name()] = true
	}
	// A name two servers' tools share ("a" with "_x" and "a_" with "x"
	// are both a___x), or one a built-in has, is given to none of the
	// servers' tools: which would win would hang on which server listed
	// first, and a call approved as one tool could run as the other
	// after a restart.
	clashes := map[string][]LeftOut{}
	for _, s := range m.servers {
		s.mu.Lock()
		for _, t := range s.tools {
			others := len(owners[t.name]) - 1
			if others == 0 && !builtin[t.name] {
				all = append(all, t)
				continue
			}
			why := fmt.Sprintf("its name %s is that of a built-in tool", t.name)
			if others > 0 {
				var names []string
				for _, o := range owners[t.name] {
					if o != t {
						names = append(names, fmt.Sprintf("%s of server %s", strconv.QuoteToGraphic(o.remote.Name), o.srv.cfg.Name))
					}
				}
				why = fmt.Sprintf("its name %s is also that of %s; neither is offered", t.name, strings.Join(names, ", "))
			}
			clashes[s.cfg.Name] = append(clashes[s.cfg.Name], LeftOut{Tool: t.remote.Name, Why: why})
		}
		s.mu.Unlock()
	}
	for name, c := range clashes {
		m.log.WithFields(logrus.Fields{"mcp_server": name, "tools": len(c)}).Warn("MCP tools left out: their names clash with other tools'")
	}
	m.clashes.Store(&clashes)
	reg, err := tools.NewRegistry(m.policy, all...)
	if err != nil {
		m.log.WithError(err).Error("MCP tools: keeping the previous tool list")
		return
	}
	m.reg.Store(reg)
	for name := range m.policy.Tools {
		srv, _, isMCP := strings.Cut(name, tools.MCPToolSeparator)
		if !isMCP || have[name] {
			continue
		}
		for _, s := range m.servers {
			if s.cfg.Name == srv && s.status().State == Up {
				m.log.WithField("tool", name).Warn("the policy has a rule for a tool its MCP server does not offer")
			}
		}
	}
}

// goRefresh lists a server's tools again after it said they changed.
func (m *Manager) goRefresh(s *server) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		sess, err := s.session()
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.opts.ConnectTimeout)
		defer cancel()
		if err := s.refresh(ctx, sess); err != nil {
			s.log.WithField("error", s.redact(err.Error())).Warn("MCP server said its tools changed, but listing them failed")
			return
		}
		m.rebuild()
		s.log.Info("MCP server's tools changed; listed again")
	}()
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
