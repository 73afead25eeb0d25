package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// runMCP is `bot mcp`: the OAuth connections of the policy's MCP servers.
func runMCP(ctx context.Context, args []string, e env) error {
	sub := ""
	if len(args) > 0 {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "connect":
		return mcpConnect(ctx, args, e)
	case "connections":
		return mcpConnections(ctx, args, e)
	case "revoke":
		return mcpRevoke(ctx, args, e)
	case "conformance-client":
		return mcpConformanceClient(ctx, args, e)
	case "", "help", "-h", "-help", "--help":
		fmt.Fprint(e.stdout, "usage: bot mcp connect|connections|revoke [flags]\n"+helpText["mcp"])
		return nil
	}
	return fmt.Errorf("unknown command %q of bot mcp (bot mcp --help lists them)", sub)
}

// serverFirst moves a leading server name after the flags, so that both
// "revoke tickets --user U" and "revoke --user U tickets" parse.
func serverFirst(args []string) []string {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return append(slices.Clone(args[1:]), args[0])
	}
	return args
}

// mcpServerArg reads the one argument of a command that names a server.
func mcpServerArg(fs interface {
	NArg() int
	Arg(int) string
}, policy *tools.Policy, name string) (tools.MCPServer, error) {
	if fs.NArg() != 1 {
		return tools.MCPServer{}, fmt.Errorf("bot mcp %s: want the name of one MCP server of BOT_POLICY", name)
	}
	cfg, ok := policy.MCPServers[fs.Arg(0)]
	if !ok {
		return tools.MCPServer{}, fmt.Errorf("bot mcp %s: BOT_POLICY has no MCP server %q", name, fs.Arg(0))
	}
	return cfg, nil
}

// operatorBroker opens the connections in the Redis of REDIS_URL.
func operatorBroker(ctx context.Context, e env, name string) (*mcpauth.Broker, *tools.Policy, func(), error) {
	policy, err := bot.LoadPolicy(e.getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	if e.getenv(mcpauth.KeyEnv) == "" {
		return nil, nil, nil, fmt.Errorf("bot mcp %s opens the connections the bot keeps, sealed with MCP_TOKEN_KEY, and MCP_TOKEN_KEY is not set: "+
			"set it to the bot's (a bot without one seals them with a key of its own process, which nothing else opens)", name)
	}
	store, closeStore, err := operatorStore(ctx, e, "mcp "+name)
	if err != nil {
		return nil, nil, nil, err
	}
	log, err := newLogger(e.getenv, e.stderr, logrus.WarnLevel)
	if err != nil {
		closeStore()
		return nil, nil, nil, err
	}
	b, err := bot.NewBroker(e.getenv, log, store, policy)
	if err != nil {
		closeStore()
		return nil, nil, nil, err
	}
	return b, policy, closeStore, nil
}

// mcpConnect makes a connection: the bot's own (auth: service), or, with
// --user, a person's. It prints the authorization URL; the bot's callback
// completes it, or the address the browser ended on (or the code) pasted
// here. A server that lists its tools without a token may still want one
// at a call: it is asked (mcpauth.Broker.Connect) for the authorization a
// call would start, and a server that wants none gets no connection and
// the command says so, rather than Connected.
func mcpConnect(ctx context.Context, args []string, e env) error {
	fs := flags("mcp connect", "mcp connect SERVER [--user U]", e)
	user := fs.String("user", "", "connect as this Slack user (default: the bot's own identity)")
	if err := fs.Parse(serverFirst(args)); err != nil {
		return err
	}
	b, policy, closeStore, err := operatorBroker(ctx, e, "connect")
	if err != nil {
		return err
	}
	defer closeStore()
	cfg, err := mcpServerArg(fs, policy, "connect")
	if err != nil {
		return err
	}
	if cfg.Auth == tools.AuthStatic {
		return fmt.Errorf("bot mcp connect: MCP server %q has no auth: (service or requester) in BOT_POLICY", cfg.Name)
	}
	who := mcpauth.Service
	if *user != "" {
		who = *user
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(e.stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	prompter := mcpauth.PrompterFunc(func(ctx context.Context, p mcpauth.Prompt) error {
		fmt.Fprintf(e.stdout, "Open this address in a browser and allow the connection to %s:\n\n  %s\n\n"+
			"The bot's %s completes it; or paste here the address the browser ended on (or the code): ",
			cfg.Name, p.URL, bot.CallbackPath)
		state := stateOf(p.URL)
		go func() {
			select {
			case line, ok := <-lines:
				if !ok || strings.TrimSpace(line) == "" {
					return
				}
				q := pastedQuery(line, state)
				if _, err := b.Complete(ctx, q); err != nil && !errors.Is(err, mcpauth.ErrNoState) {
					fmt.Fprintf(e.stderr, "\n%v\n", err)
				}
			case <-ctx.Done():
			}
		}()
		return nil
	})
	ctx, cancel := context.WithTimeout(ctx, mcp.ConnectWait)
	defer cancel()
	id := mcpauth.Identity{Server: cfg.Name, User: who}
	cs, list, err := mcp.Dial(ctx, cfg, b, who, prompter, nil)
	if err != nil {
		return err
	}
	_ = cs.Close()
	connected, err := b.Connected(ctx, id)
	if err != nil {
		return err
	}
	if !connected {
		// The server listed its tools without asking for a token: many
		// ask only at a call. Start the authorization a call would.
		if err := b.Connect(ctx, cfg, id, prompter); err != nil {
			return fmt.Errorf("bot mcp connect: MCP server %q lists its tools without asking for a token, and the authorization a call would start did not complete, so no connection was made or kept: %w", cfg.Name, err)
		}
		if cs, list, err = mcp.Dial(ctx, cfg, b, who, prompter, nil); err != nil {
			return err
		}
		_ = cs.Close()
	}
	fmt.Fprintf(e.stdout, "\nConnected to %s as %s (%d tools).\n", cfg.Name, shownUser(who), len(list))
	return nil
}

func stateOf(authURL string) string {
	u, err := url.Parse(authURL)
	if err != nil {
		return ""
	}
	return u.Query().Get("state")
}

// pastedQuery reads what a person pasted: the address the browser ended
// on, or just the code.
func pastedQuery(line, state string) url.Values {
	line = strings.TrimSpace(line)
	if u, err := url.Parse(line); err == nil && u.RawQuery != "" {
		return u.Query()
	}
	return url.Values{"code": {line}, "state": {state}}
}

func shownUser(u string) string {
	if u == mcpauth.Service {
		return "the bot"
	}
	return u
}

// mcpConnections lists connections, never their tokens.
func mcpConnections(ctx context.Context, args []string, e env) error {
	fs := flags("mcp connections", "mcp connections [--user U] [--server S] [--json]", e)
	user := fs.String("user", "", "only this Slack user's connections")
	server := fs.String("server", "", "only this MCP server's connections")
	asJSON := fs.Bool("json", false, "JSON lines")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	b, _, closeStore, err := operatorBroker(ctx, e, "connections")
	if err != nil {
		return err
	}
	defer closeStore()
	list, err := b.Connections(ctx, *server, *user)
	if err != nil {
		return err
	}
	e, flush := escapedTerminal(e)
	defer flush()
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		for _, c := range list {
			_ = enc.Encode(map[string]any{"server": c.Server, "user": c.User, "connected": c.Connected, "expiry": c.Expiry, "scopes": c.Scopes, "refreshable": c.Refreshable})
		}
		return nil
	}
	if len(list) == 0 {
		fmt.Fprintln(e.stdout, "no connections")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERVER\tAS\tCONNECTED\tSCOPES\tRENEWS")
	for _, c := range list {
		when := "-"
		if !c.Connected.IsZero() {
			when = c.Connected.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\n", c.Server, shownUser(c.User), when, strings.Join(c.Scopes, " "), c.Refreshable)
	}
	return w.Flush()
}

// mcpRevoke deletes a connection: the next call as that identity asks to
// connect again.
func mcpRevoke(ctx context.Context, args []string, e env) error {
	fs := flags("mcp revoke", "mcp revoke SERVER [--user U]", e)
	user := fs.String("user", "", "the Slack user whose connection to revoke (default: the bot's own)")
	if err := fs.Parse(serverFirst(args)); err != nil {
		return err
	}
	b, policy, closeStore, err := operatorBroker(ctx, e, "revoke")
	if err != nil {
		return err
	}
	defer closeStore()
	name := fs.Arg(0)
	if _, known := policy.MCPServers[name]; !known && fs.NArg() == 1 {
		// A server since removed from the policy may still have
		// connections: they can be revoked.
		policy.MCPServers[name] = tools.MCPServer{Name: name}
	}
	cfg, err := mcpServerArg(fs, policy, "revoke")
	if err != nil {
		return err
	}
	who := mcpauth.Service
	if *user != "" {
		who = *user
	}
	ok, err := b.Revoke(ctx, mcpauth.Identity{Server: cfg.Name, User: who})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s has no connection to %s", shownUser(who), cfg.Name)
	}
	fmt.Fprintf(e.stdout, "Revoked the connection of %s to %s.\n", shownUser(who), cfg.Name)
	return nil
}

// mcpConformanceClient is the client the MCP conformance suite runs: it
// connects to URL with the bot's OAuth code (mcpauth, tools/mcp), lists
// the tools and calls the first, playing the person's browser where an
// authorization needs one, and the person's identity provider where the
// context gives an ID token. The scenario and its context come from
// MCP_CONFORMANCE_SCENARIO and MCP_CONFORMANCE_CONTEXT.
func mcpConformanceClient(ctx context.Context, args []string, e env) error {
	fs := flags("mcp conformance-client", "mcp conformance-client [--client-metadata-url U] URL", e)
	cimd := fs.String("client-metadata-url", "", "the client ID metadata document the client says it is")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("bot mcp conformance-client: want the server's URL")
	}
	var cc struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		PrivateKey   string `json:"private_key_pem"`
		// Enterprise-managed authorization (SEP-990): the person's ID
		// token at their identity provider, as their sign-in there
		// would give it.
		IdPIssuer   string `json:"idp_issuer"`
		IdPClientID string `json:"idp_client_id"`
		IdPIDToken  string `json:"idp_id_token"`
	}
	if raw := e.getenv("MCP_CONFORMANCE_CONTEXT"); raw != "" {
		_ = json.Unmarshal([]byte(raw), &cc)
	}
	scenario := e.getenv("MCP_CONFORMANCE_SCENARIO")
	cfg := tools.MCPServer{Name: "conformance", URL: fs.Arg(0), Auth: tools.AuthService,
		OAuth: tools.MCPOAuth{ClientMetadataURL: *cimd, ClientID: cc.ClientID, ClientSecret: cc.ClientSecret, Grant: tools.GrantAuthorizationCode}}
	if strings.HasPrefix(scenario, "auth/client-credentials") {
		cfg.OAuth.Grant, cfg.OAuth.PrivateKey = tools.GrantClientCredentials, cc.PrivateKey
	}
	who := mcpauth.Service
	opts := mcpauth.Options{RedirectURL: "http://127.0.0.1:3000" + bot.CallbackPath}
	if cc.IdPIssuer != "" && cc.IdPIDToken != "" {
		cfg.Auth, who = tools.AuthRequester, "conformance-person"
		cfg.OAuth.IdentityProvider = &tools.MCPIdentityProvider{Issuer: cc.IdPIssuer, ClientID: cc.IdPClientID}
		opts.IDToken = func(context.Context, mcpauth.Identity) (string, error) { return cc.IdPIDToken, nil }
	}
	log, err := newLogger(e.getenv, e.stderr, logrus.InfoLevel)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	if !strings.HasPrefix(scenario, "auth/") {
		return conformanceCall(ctx, fs.Arg(0), log, e)
	}
	key, _, err := mcpauth.KeyFromEnv(func(string) string { return "" })
	if err != nil {
		return err
	}
	opts.Logger = log
	b, err := mcpauth.New(mcpauth.NewMemStore(), key, opts)
	if err != nil {
		return err
	}
	cs, list, err := mcp.Dial(ctx, cfg, b, who, browser(b), nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	names := make([]string, 0, len(list))
	for _, t := range list {
		names = append(names, t.Name)
	}
	fmt.Fprintf(e.stdout, "tools: %s\n", strings.Join(names, ", "))
	if len(list) == 0 {
		return nil
	}
	slices.SortFunc(list, func(a, b *sdk.Tool) int { return strings.Compare(a.Name, b.Name) })
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: list[0].Name, Arguments: map[string]any{}})
	if err != nil {
		return fmt.Errorf("call %s: %w", list[0].Name, err)
	}
	fmt.Fprintf(e.stdout, "called %s (isError %t)\n", list[0].Name, res.IsError)
	return nil
}

// conformanceCall is a scenario without authorization, run the way the
// bot runs a call: its tool list and its call through the tools/mcp
// Manager, input the server asks for during the call through the
// Manager's elicitation handling, answered by formPerson.
func conformanceCall(ctx context.Context, endpoint string, log logrus.FieldLogger, e env) error {
	policy, err := tools.ParsePolicy(fmt.Appendf(nil, "mcp_servers:\n  conformance:\n    url: %q\n    timeout: 20s\n", endpoint))
	if err != nil {
		return err
	}
	m, err := mcp.New(policy, nil, mcp.Options{Logger: log, Elicitor: formPerson{}, StartWait: 15 * time.Second, ConnectTimeout: 15 * time.Second})
	if err != nil {
		return err
	}
	defer m.Close()
	var list []tools.InfoTool
	for _, t := range m.Tools() {
		it, ok := t.(tools.InfoTool)
		if ot, from := t.(tools.OriginTool); ok && from && ot.Origin().Server == "conformance" {
			list = append(list, it)
		}
	}
	if st := m.Status(); len(list) == 0 && len(st) > 0 && st[0].Err != "" {
		return fmt.Errorf("MCP server %q: %s", st[0].Name, st[0].Err)
	}
	names := make([]string, 0, len(list))
	for _, t := range list {
		names = append(names, t.Name())
	}
	slices.Sort(names)
	fmt.Fprintf(e.stdout, "tools: %s\n", strings.Join(names, ", "))
	if len(list) == 0 {
		return nil
	}
	slices.SortFunc(list, func(a, b tools.InfoTool) int { return strings.Compare(a.Name(), b.Name()) })
	t := list[0]
	info := tools.CallInfo{Thread: "conformance", Call: "call-1", Requester: conformancePerson}
	out, err := t.CallWithInfo(ctx, info, json.RawMessage(`{}`))
	if err != nil {
		return fmt.Errorf("call %s: %w", t.Name(), err)
	}
	fmt.Fprintf(e.stdout, "called %s: %s\n", t.Name(), out)
	return nil
}

// conformancePerson is who asks for the conformance client's calls.
const conformancePerson = "conformance-person"

// formPerson plays the person asked for input: they open the form the
// bot shows in Slack for the request and send it as it is, so what they
// answer is what the form starts with (the schema's defaults), read back
// by the bot's own reading of a submitted form.
type formPerson struct{}

func (formPerson) Elicit(_ context.Context, el tools.Elicitation) (tools.ElicitAnswer, error) {
	fields, err := slackui.ElicitFields(el.Schema)
	if err != nil {
		return tools.ElicitAnswer{}, err
	}
	view, err := slackui.ElicitForm(el.Tool, el.Message, fields, "")
	if err != nil {
		return tools.ElicitAnswer{}, err
	}
	content, problems := slackui.ElicitContent(el.Schema, submittedAsShown(view))
	if len(problems) > 0 {
		return tools.ElicitAnswer{}, fmt.Errorf("the form as shown is not a valid answer: %v", problems)
	}
	return tools.ElicitAnswer{Action: tools.ElicitAccept, Content: content, By: conformancePerson}, nil
}

// submittedAsShown is the state Slack sends for a form submitted without
// a change: each input's initial value.
func submittedAsShown(view slack.ModalViewRequest) *slack.ViewState {
	state := &slack.ViewState{Values: map[string]map[string]slack.BlockAction{}}
	for _, b := range view.Blocks.BlockSet {
		in, ok := b.(*slack.InputBlock)
		if !ok {
			continue
		}
		var a slack.BlockAction
		switch el := in.Element.(type) {
		case *slack.PlainTextInputBlockElement:
			a.Value = el.InitialValue
		case *slack.NumberInputBlockElement:
			a.Value = el.InitialValue
		case *slack.SelectBlockElement:
			if el.InitialOption != nil {
				a.SelectedOption = *el.InitialOption
			}
		case *slack.MultiSelectBlockElement:
			for _, o := range el.InitialOptions {
				a.SelectedOptions = append(a.SelectedOptions, *o)
			}
		case *slack.CheckboxGroupsBlockElement:
			for _, o := range el.InitialOptions {
				a.SelectedOptions = append(a.SelectedOptions, *o)
			}
		case *slack.DatePickerBlockElement:
			a.SelectedDate = el.InitialDate
		case *slack.DateTimePickerBlockElement:
			a.SelectedDateTime = el.InitialDateTime
		}
		state.Values[in.BlockID] = map[string]slack.BlockAction{slackui.ElicitActionID: a}
	}
	return state
}

// browser plays a person who opens the authorization URL and allows the
// connection: it follows the authorization server's redirects up to the
// bot's callback, and completes it as the callback would.
func browser(b *mcpauth.Broker) mcpauth.Prompter {
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return mcpauth.PrompterFunc(func(ctx context.Context, p mcpauth.Prompt) error {
		next := p.URL
		for range 10 {
			if strings.HasPrefix(next, b.RedirectURL()) {
				u, err := url.Parse(next)
				if err != nil {
					return err
				}
				_, err = b.Complete(ctx, u.Query())
				return err
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, next, nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			loc, err := resp.Location()
			if err != nil {
				return fmt.Errorf("the authorization server answered %s without sending the browser on", resp.Status)
			}
			next = loc.String()
		}
		return errors.New("too many redirects")
	})
}
