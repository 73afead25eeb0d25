package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/tools"
)

// OAuth (see the mcpauth package): a url: server with auth: service or
// auth: requester is reached with an OAuth token rather than, or beside,
// its static headers.
//
// The server's shared session — the one its tools are listed with — runs
// as the bot (mcpauth.Service): the client credentials grant, or the
// connection an admin made with `bot mcp connect SERVER`. It never asks
// anyone: without a connection the server is down, and says so.
//
// With auth: requester, each call runs in a session of its own, with the
// token of the person who asked for the call's turn (tools.CallInfo's
// Requester), never the bot's nor anyone else's. When they have no
// connection, or the server refuses their token, they are asked to
// connect (the Prompter: an ephemeral Connect button in Slack). When the
// run can pause, the call returns a *tools.ConnectRequiredError and the run
// pauses until the callback, on any replica, completes the connection and
// wakes it (mcpauth's pause.go); otherwise the call waits up to ConnectWait
// for the connection. When someone else edited the arguments, the
// requester is asked first to confirm them (through the Elicitor, which
// only they may answer): nobody acts as another person through an Edit.

// ConnectWait is how long a call waits for its requester to connect, and
// how long an authorization request is accepted.
const ConnectWait = 10 * time.Minute

// oauthHooks are the Manager's OAuth settings, set by the wiring once the
// store exists.
type oauthHooks struct {
	broker   atomic.Pointer[mcpauth.Broker]
	prompter atomic.Pointer[mcpauth.Prompter]
}

// SetAuth sets where connections are kept and who asks people to connect
// (nil: nobody can be asked; a call of a person without a connection
// fails and says why).
func (m *Manager) SetAuth(b *mcpauth.Broker, p mcpauth.Prompter) {
	m.oauth.broker.Store(b)
	if p != nil {
		m.oauth.prompter.Store(&p)
	}
}

// SetPrompter sets who asks people to connect, for front ends built after
// the Manager.
func (m *Manager) SetPrompter(p mcpauth.Prompter) { m.oauth.prompter.Store(&p) }

func (m *Manager) prompter() mcpauth.Prompter {
	if p := m.oauth.prompter.Load(); p != nil {
		return *p
	}
	return nil
}

// ErrNoAuthStore is wrapped by the error of a server that needs OAuth in
// a Manager without a Broker.
var ErrNoAuthStore = errors.New("OAuth needs a connection store (mcpauth.Broker), and none is set")

// authorize gives the shared session's transport the bot's identity.
// Without a Broker (`bot tools`, which opens no Redis) the session goes
// without a token: a server that lets its tools be listed so is listed,
// another is down and says why.
func (s *server) authorize(t *sdk.StreamableClientTransport) error {
	b := s.m.oauth.broker.Load()
	if s.cfg.Auth == tools.AuthStatic || b == nil {
		return nil
	}
	h, err := b.Handler(s.cfg, mcpauth.Service, nil, tools.CallInfo{})
	if err != nil {
		return err
	}
	t.OAuthHandler = h
	return nil
}

// httpClient is the client of the server's HTTP requests: the
// configured one, with the server's headers.
func (s *server) httpClient() *http.Client {
	hc := s.m.opts.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	return &http.Client{Transport: sniffHTTP{next: headers{set: s.cfg.Headers, next: hc.Transport}, w: &s.wire}, Timeout: hc.Timeout, Jar: hc.Jar}
}

// sessionFor returns the session a call runs in, and what to do when the
// call is over: the shared session, or, for auth: requester, a session
// of the requester's own. timeout is how long the call may take once it
// is sent.
func (s *server) sessionFor(ctx context.Context, info tools.CallInfo, tool string, args json.RawMessage) (sess *session, release func(), timeout time.Duration, err error) {
	sess, release, err = s.requesterSession(ctx, info, tool, args)
	if err != nil || s.cfg.Auth != tools.AuthRequester {
		return sess, release, s.cfg.Timeout, err
	}
	// The server may let a session start without a token and ask for one
	// at the call: whoever has no connection yet gets the time to make one.
	timeout = s.cfg.Timeout
	if ok, err := s.m.oauth.broker.Load().Connected(ctx, mcpauth.Identity{Server: s.cfg.Name, User: info.Requester}); err != nil || !ok {
		timeout += ConnectWait
	}
	return sess, release, timeout, nil
}

func (s *server) requesterSession(ctx context.Context, info tools.CallInfo, tool string, args json.RawMessage) (sess *session, release func(), err error) {
	shared, err := s.session()
	if err != nil || s.cfg.Auth != tools.AuthRequester {
		return shared, func() {}, err
	}
	if info.Requester == "" {
		return nil, nil, fmt.Errorf("MCP server %q runs calls as the person who asked for them, and this call has none", s.cfg.Name)
	}
	if err := s.confirmEdit(ctx, info, tool, args); err != nil {
		return nil, nil, err
	}
	b := s.m.oauth.broker.Load()
	if b == nil {
		return nil, nil, fmt.Errorf("MCP server %q: %w", s.cfg.Name, ErrNoAuthStore)
	}
	h, err := b.Handler(s.cfg, info.Requester, s.m.prompter(), info)
	if err != nil {
		return nil, nil, err
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "countersign", Version: ClientVersion()}, &sdk.ClientOptions{
		Capabilities:       &sdk.ClientCapabilities{},
		ElicitationHandler: s.elicit,
		MultiRoundTrip:     &sdk.MultiRoundTripOptions{Disabled: true},
	})
	transport := &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.httpClient(), MaxRetries: s.m.opts.HTTPRetries, OAuthHandler: h}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, nil, s.connectError(info.Requester, err)
	}
	s.log.WithFields(logrus.Fields{"thread": info.Thread, "call": info.Call, "identity": mcpauth.Identity{Server: s.cfg.Name, User: info.Requester}.String()}).Debug("MCP session as the requester")
	return &session{cs: cs, done: make(chan struct{})}, func() { _ = cs.Close() }, nil
}

// connectError says why a session as a person could not be made.
func (s *server) connectError(user string, err error) error {
	var paused *tools.ConnectRequiredError
	switch {
	case errors.As(err, &paused):
		return paused
	case errors.Is(err, mcpauth.ErrNotConnected):
		return fmt.Errorf("the call runs as %s on MCP server %q, who has not connected to it (nothing was sent): %w", user, s.cfg.Name, mcpauth.ErrNotConnected)
	case errors.Is(err, mcpauth.ErrDenied):
		return fmt.Errorf("the call runs as %s on MCP server %q, and the connection was refused (nothing was sent): %w", user, s.cfg.Name, mcpauth.ErrDenied)
	}
	return fmt.Errorf("MCP server %q, as %s: %w", s.cfg.Name, user, s.cfg.Secrets.RedactError(err))
}

// ErrNotConfirmed is wrapped by the error of a call whose requester did
// not confirm arguments someone else edited.
var ErrNotConfirmed = errors.New("the requester did not confirm the edited arguments")

// confirmSchema is the form of confirmEdit: nothing to fill in; an
// accepted answer confirms.
var confirmSchema = json.RawMessage(`{"type":"object","properties":{}}`)

// confirmEdit asks the requester to confirm arguments someone else
// edited, before a call runs with the requester's token.
func (s *server) confirmEdit(ctx context.Context, info tools.CallInfo, tool string, args json.RawMessage) error {
	if info.EditedBy == "" || info.EditedBy == info.Requester {
		return nil
	}
	el := s.m.elicitor()
	refused := fmt.Errorf("not run: it runs as %s on MCP server %q, and %s edited its arguments: %w", info.Requester, s.cfg.Name, info.EditedBy, ErrNotConfirmed)
	if el == nil {
		return refused
	}
	shown := string(args)
	if len(shown) > 1500 {
		shown = shown[:1500] + "…"
	}
	ans, err := el.Elicit(ctx, tools.Elicitation{
		Call: info, Tool: tool, Schema: confirmSchema,
		Message: fmt.Sprintf("This call runs with your own connection to %s, and someone else (%s) edited its arguments. "+
			"It runs only if you confirm them (Answer, then submit); Decline and it does not run. The arguments: %s", s.cfg.Name, info.EditedBy, shown),
	})
	if err != nil || ans.Action != tools.ElicitAccept || ans.By != "" && ans.By != info.Requester {
		return refused
	}
	return nil
}

// Dial opens a session with an HTTP server as user (mcpauth.Service for
// the bot's own identity), asking through prompter when a connection is
// needed, and lists the server's tools, which makes a server that wants a
// token ask for one. It is what `bot mcp connect` runs; the caller closes
// the session.
func Dial(ctx context.Context, cfg tools.MCPServer, b *mcpauth.Broker, user string, prompter mcpauth.Prompter, hc *http.Client) (*sdk.ClientSession, []*sdk.Tool, error) {
	if cfg.URL == "" {
		return nil, nil, fmt.Errorf("MCP server %q is not a url: server", cfg.Name)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	t := &sdk.StreamableClientTransport{Endpoint: cfg.URL,
		HTTPClient: &http.Client{Transport: headers{set: cfg.Headers, next: hc.Transport}, Timeout: hc.Timeout}}
	if cfg.Auth != tools.AuthStatic {
		h, err := b.Handler(cfg, user, prompter, tools.CallInfo{})
		if err != nil {
			return nil, nil, err
		}
		t.OAuthHandler = h
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "countersign", Version: ClientVersion()}, &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}})
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("MCP server %q: %w", cfg.Name, cfg.Secrets.RedactError(err))
	}
	var list []*sdk.Tool
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			_ = cs.Close()
			return nil, nil, fmt.Errorf("MCP server %q: list tools: %w", cfg.Name, cfg.Secrets.RedactError(err))
		}
		list = append(list, tool)
	}
	return cs, list, nil
}

var _ tools.IdentityTool = (*tool)(nil)

// RunsAs says whose identity a call runs with: the requester's (auth:
// requester), the bot's ("service"), or none (static headers).
func (t *tool) RunsAs(requester string) string {
	switch t.srv.cfg.Auth {
	case tools.AuthRequester:
		return requester
	case tools.AuthService:
		return "service"
	}
	return ""
}
