// Command bot runs Countersign.
//
//	bot [serve]            serve Slack (the default when SLACK_BOT_TOKEN is set)
//	bot [playground]       a simulated Slack channel in the browser (the default otherwise)
//	bot chat [--thread ID] talk to the agent in the terminal
//	bot threads list       recent threads in Redis, their status and waiting calls
//	bot approvals list     the calls waiting for a decision, or for given people
//	bot checkpoints …      list, show, fork and delete a thread's checkpoints
//	bot audit …            the audit trail: list, verify its hash chain, export
//	bot tools              the tools offered to the model, their sources and rules
//	bot mcp …              the MCP servers' OAuth connections: connect, list, revoke
//	bot version            the build's version
//
// Configuration comes from the environment (docs/configuration.md).
// With nothing configured the bot keeps its threads in a redis-server it
// starts with its data in the user's state directory (with redis-server on
// PATH; otherwise an embedded Redis, whose data is lost on exit), and uses
// an offline demo model.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/internal/termtext"
)

func main() {
	closeProc()
	ctx, stop := stopOnSignal(os.Stderr, os.Exit)
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)
	stop()
	var told *toldError
	if errors.As(err, &told) {
		os.Exit(1) // the command said why
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bot:", termtext.Text(err.Error())) // errors quote stored text
		os.Exit(1)
	}
}

// stopOnSignal returns a context that SIGINT or SIGTERM cancels: the
// bot stops taking work and gives running steps their grace to finish and
// save. A second signal does not wait for them: it says so on stderr and
// exits at once (status 1), as a Ctrl-C pressed twice at a terminal asks;
// whatever was cut off resumes from its last checkpoint, as after a
// crash. A signal within signalEcho of the first is the same one sent
// twice (timeout(1) signals the process and then its group) and is not a
// second. stop ends the watch.
func stopOnSignal(stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		var first time.Time
		select {
		case <-sigs:
			first = time.Now()
			cancel()
		case <-done:
			return
		}
		for {
			select {
			case sig := <-sigs:
				if time.Since(first) < signalEcho {
					continue
				}
				fmt.Fprintf(stderr, "bot: %s again: stopping now, without waiting for running steps (they resume from their last checkpoint)\n", sig)
				exit(1)
				return
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			cancel()
		})
	}
}

// signalEcho is how soon after the first signal another is taken for the
// same one delivered twice rather than a second.
const signalEcho = 500 * time.Millisecond

// toldError is a failure a command has already described in its output
// (bot audit verify's BROKEN: line): the bot exits 1 and prints no more.
type toldError struct{ err error }

func (e *toldError) Error() string { return e.err.Error() }
func (e *toldError) Unwrap() error { return e.err }

// command is one subcommand: what it does, in a line, and how to run it.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, env env) error
}

// env is what a subcommand reads and writes.
type env struct {
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
	// unknown are the variables of the environment that look like the
	// bot's settings and are none (bot.UnknownSettings): serve and the
	// playground log a warning of each; for the other commands, run
	// prints a line of each on stderr.
	unknown []bot.UnknownSetting
}

// commands are the subcommands, in the order usage lists them.
var commands = []struct {
	name string
	command
}{
	{"serve", command{"serve Slack: HTTP, or Socket Mode with SLACK_APP_TOKEN (the default when SLACK_BOT_TOKEN is set)", runServe}},
	{"playground", command{"a simulated Slack channel in the browser on BOT_ADDR (the default without SLACK_BOT_TOKEN)", runPlayground}},
	{"chat", command{"talk to the agent in the terminal; --thread ID resumes a thread", runChat}},
	{"threads", command{"list recent threads in Redis: status, waiting calls (REDIS_URL, or the local Redis)", runThreads}},
	{"approvals", command{"list the calls waiting for a decision, all or those --user may decide (REDIS_URL, or the local Redis)", runApprovals}},
	{"checkpoints", command{"list, show, fork and delete a thread's checkpoints (REDIS_URL, or the local Redis)", runCheckpoints}},
	{"audit", command{"the audit trail: list it, verify its hash chain, export it (REDIS_URL, or the local Redis)", runAudit}},
	{"tools", command{"list every tool offered to the model (built-in and BOT_POLICY's MCP servers), its source, arguments and rule", runTools}},
	{"mcp", command{"the MCP servers' OAuth connections: connect, connections, revoke (REDIS_URL, or the local Redis; needs MCP_TOKEN_KEY)", runMCP}},
	{"version", command{"print the build's version", runVersion}},
	{"help", command{"print this help", nil}},
}

// run dispatches to a subcommand. environ is the environment, in
// os.Environ's form.
func run(ctx context.Context, args []string, environ []string, stdin io.Reader, stdout, stderr io.Writer) error {
	getenv := lookupFunc(environ)
	e := env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	// Without Slack credentials, the playground: a simulated Slack channel
	// in the browser, on the embedded defaults.
	name := "playground"
	if getenv("SLACK_BOT_TOKEN") != "" {
		name = "serve"
	}
	if len(args) > 0 {
		switch args[0] {
		case "help", "-h", "-help", "--help":
			fmt.Fprint(stdout, usage())
			return nil
		case "-v", "-version", "--version":
			return runVersion(ctx, nil, e)
		}
		if args[0] != "" && args[0][0] != '-' {
			name, args = args[0], args[1:]
		}
	}
	for _, c := range commands {
		if c.name == name && c.run != nil {
			if name != "version" && !asksHelp(args) {
				e.unknown = bot.UnknownSettings(environ)
			}
			if name != "serve" && name != "playground" {
				// One line each, before the command's own output; serve
				// and the playground log them.
				for _, u := range e.unknown {
					fmt.Fprintf(stderr, "bot %s: %s\n", name, u)
				}
			}
			err := c.run(ctx, args, e)
			if errors.Is(err, flag.ErrHelp) {
				return nil // the subcommand printed its usage
			}
			return err
		}
	}
	return fmt.Errorf("unknown command %q (bot help lists them)", name)
}

// lookupFunc returns a getenv that reads environ as os.Getenv reads the
// process's environment: of a name set twice, the first value.
func lookupFunc(environ []string) func(string) string {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, seen := vars[k]; !seen {
				vars[k] = v
			}
		}
	}
	return func(k string) string { return vars[k] }
}

// asksHelp reports whether args ask a command for its help.
func asksHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// logUnknownSettings logs a warning for each variable that looks like a
// setting and is none, with its name and the setting it probably meant
// (never its value: it may be a secret).
func logUnknownSettings(log logrus.FieldLogger, unknown []bot.UnknownSetting) {
	for _, u := range unknown {
		fields := logrus.Fields{"variable": u.Name}
		if u.Suggestion != "" {
			fields["suggestion"] = u.Suggestion
		}
		log.WithFields(fields).Warn(u.String())
	}
}

func usage() string {
	s := "usage: bot [command] [flags]\n\ncommands:\n"
	for _, c := range commands {
		s += fmt.Sprintf("  %-12s %s\n", c.name, c.summary)
	}
	return s + `
"bot COMMAND --help" shows a command's flags and an example.

Without LLM_PROVIDER, OPENAI_API_KEY or ANTHROPIC_API_KEY the model is the
offline demo: it fetches a URL you give it with http_request ("fetch
https://example.com"), and calls any tool you name, an MCP server's included
("use everything__echo to say hi"; MCP tools are named <server>__<tool>, and
"bot tools" lists them), so approvals and MCP can be tried without an API key.

Environment: SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN, SLACK_API_URL,
SLACK_STREAMING, SLACK_STREAM_INTERVAL, BOT_ADDR, REDIS_URL, REDIS_CLUSTER,
REDIS_WAIT_REPLICAS, LLM_PROVIDER, LLM_MODEL, LLM_TEMPERATURE, LLM_REASONING_EFFORT,
LLM_THINKING_BUDGET, LLM_IMAGES, OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY,
ANTHROPIC_BASE_URL, BOT_POLICY, AUDIT_RETENTION, MCP_TOKEN_KEY, BOT_PUBLIC_URL,
LOG_LEVEL, LOG_FORMAT (see README.md and docs/configuration.md); without
REDIS_URL, XDG_STATE_HOME (the state directory's parent). A variable that
starts like these and is none of them is named at start-up, with the one it
probably meant.
`
}

// flags returns a flag set for a subcommand whose usage line is synopsis.
// Its usage lists the flags, then what the subcommand does and examples
// (helpText).
func flags(name, synopsis string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bot %s\n", synopsis)
		printFlags(fs)
		fmt.Fprint(fs.Output(), helpFor(name))
	}
	return fs
}

// printFlags lists a flag set's flags, or says there are none (and, but
// for version, which reads nothing, that the environment configures it).
func printFlags(fs *flag.FlagSet) {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 && fs.Name() == "version" {
		fmt.Fprint(fs.Output(), "\nno flags\n")
		return
	}
	if n == 0 {
		fmt.Fprint(fs.Output(), "\nno flags: the environment configures it (bot help lists the variables)\n")
		return
	}
	fmt.Fprint(fs.Output(), "\nflags:\n")
	fs.PrintDefaults()
}

// helpFor is the help of a subcommand (or of its command, for one
// without help of its own) after its flags.
func helpFor(name string) string {
	if h, ok := helpText[name]; ok {
		return h
	}
	first, _, _ := strings.Cut(name, " ")
	return helpText[first]
}

// helpText is what each subcommand's --help says after its flags: what it
// does, and examples.
var helpText = map[string]string{
	"serve": `
Serves Slack on BOT_ADDR (default 127.0.0.1:3000): the Events API, slash
commands and interactivity over HTTP (/slack/events, /slack/commands,
/slack/interactions), or Socket Mode with SLACK_APP_TOKEN (no public URL
needed); and /healthz, /readyz, /metrics (Prometheus) and /oauth/callback
(MCP servers' OAuth; browsers reach it through BOT_PUBLIC_URL).

examples:
  SLACK_BOT_TOKEN=xoxb-… SLACK_SIGNING_SECRET=… REDIS_URL=redis://localhost:6379/0 bot serve
  SLACK_BOT_TOKEN=xoxb-… SLACK_APP_TOKEN=xapp-… BOT_POLICY=policy.yaml bot serve
`,
	"playground": `
A simulated Slack channel in the browser at the URL it prints at start,
http://BOT_ADDR/?token=… (default 127.0.0.1:3000; a new token each start,
and the page opens only from it): the real handlers, with Slack played
inside the process.
The model, Redis and BOT_POLICY come from the environment, as for serve.

examples:
  bot playground
  BOT_ADDR=127.0.0.1:8080 BOT_POLICY=deploy/policy.example.yaml bot playground
  LLM_PROVIDER=openai OPENAI_API_KEY=sk-… bot playground
`,
	"tools": `
Lists every tool offered to the model under BOT_POLICY: built-in ones and
those of the policy's MCP servers (which it starts to ask), with their
source, arguments and rule, and the servers that are down.

examples:
  bot tools
  BOT_POLICY=deploy/policy.example.yaml bot tools
`,
	"threads list": `
Recent threads in the Redis of REDIS_URL (unset: the local Redis of the
state directory), their status and waiting calls.

examples:
  bot threads list
  REDIS_URL=redis://localhost:6379/0 bot threads list
  REDIS_URL=redis://localhost:6379/0 bot threads list --limit 0 --json
`,
	"approvals list": `
The calls waiting for a decision in the Redis of REDIS_URL (unset: the
local Redis of the state directory); with --user, those one of the users
may decide, by the rules of the Slack Home tab.

examples:
  REDIS_URL=redis://localhost:6379/0 bot approvals list
  REDIS_URL=redis://localhost:6379/0 bot approvals list --user U012ABCDEF --json
`,
	"chat": `
Talks to the agent in the terminal, asking approve / edit / reject at a
prompt. A paused thread survives quitting (q at a prompt) and resumes
with --thread, in the Redis of REDIS_URL or, with REDIS_URL unset and
redis-server on PATH, the local one in ~/.local/state/countersign; the
embedded Redis (no redis-server) keeps nothing across runs.

examples:
  bot chat
  REDIS_URL=redis://localhost:6379/0 bot chat --user U012ABCDEF
  REDIS_URL=redis://localhost:6379/0 bot chat --thread chat-1a2b3c4d
`,
	"audit": `
examples:
  REDIS_URL=redis://localhost:6379/0 bot audit --since 24h
  REDIS_URL=redis://localhost:6379/0 bot audit head
  REDIS_URL=redis://localhost:6379/0 bot audit export --format csv > audit.csv
  bot audit verify --file audit.csv
`,
	"checkpoints": `
examples:
  REDIS_URL=redis://localhost:6379/0 bot checkpoints list --thread chat-1a2b3c4d
  REDIS_URL=redis://localhost:6379/0 bot checkpoints fork --thread chat-1a2b3c4d --checkpoint CP --to chat-retry
  REDIS_URL=redis://localhost:6379/0 bot checkpoints delete --thread chat-retry --yes
`,
	"checkpoints list": `
examples:
  REDIS_URL=redis://localhost:6379/0 bot checkpoints list --thread chat-1a2b3c4d
`,
	"checkpoints show": `
examples:
  REDIS_URL=redis://localhost:6379/0 bot checkpoints show --thread chat-1a2b3c4d --json
`,
	"checkpoints fork": `
examples:
  REDIS_URL=redis://localhost:6379/0 bot checkpoints fork --thread chat-1a2b3c4d --checkpoint CP --to chat-retry
`,
	"checkpoints delete": `
examples:
  REDIS_URL=redis://localhost:6379/0 bot checkpoints delete --thread chat-retry --yes
`,
	"mcp": `
The OAuth connections of BOT_POLICY's MCP servers (auth: service or auth:
requester), kept in the Redis of REDIS_URL (or the local Redis), sealed
with MCP_TOKEN_KEY, which must be the bot's:

  connect SERVER [--user U]   make the bot's connection (or U's): prints the
                              authorization URL; the bot's /oauth/callback
                              completes it, or paste the address the browser
                              ended on
  connections [--user U] [--server S] [--json]
                              list connections (never their tokens)
  revoke SERVER [--user U]    delete the bot's connection (or U's)

examples:
  REDIS_URL=redis://localhost:6379/0 MCP_TOKEN_KEY=… bot mcp connect tickets
  REDIS_URL=redis://localhost:6379/0 MCP_TOKEN_KEY=… bot mcp connections --user U012ABCDEF
  REDIS_URL=redis://localhost:6379/0 MCP_TOKEN_KEY=… bot mcp revoke tickets --user U012ABCDEF
`,
	"version": `
examples:
  bot version
`,
}

// parse parses a subcommand's args. Help that is asked for goes to
// stdout, and the command then ends without error (flag.ErrHelp).
func parse(fs *flag.FlagSet, args []string, e env) error {
	// The flag package prints a bad flag's error and the whole usage;
	// the error is returned instead, once, with where to find the usage.
	fs.SetOutput(io.Discard)
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(e.stdout)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%s: %w (bot %s --help lists the flags)", fs.Name(), err, fs.Name())
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (bot %s --help lists the flags)", fs.Name(), fs.Arg(0), fs.Name())
	}
	return nil
}

func runServe(ctx context.Context, args []string, e env) error {
	if err := parse(flags("serve", "serve", e), args, e); err != nil {
		return err
	}
	return serve(ctx, e.getenv, e.unknown, e.stderr)
}

func runPlayground(ctx context.Context, args []string, e env) error {
	if err := parse(flags("playground", "playground", e), args, e); err != nil {
		return err
	}
	return playground(ctx, e.getenv, e.unknown, e.stdout, e.stderr)
}

func runChat(ctx context.Context, args []string, e env) error {
	return chat(ctx, args, e)
}

func runCheckpoints(ctx context.Context, args []string, e env) error {
	return checkpoints(ctx, args, e)
}

// needRedis refuses to run an operator command on the embedded Redis,
// which starts empty and would only say that nothing is there.
func needRedis(e env, name string) error {
	if e.getenv("REDIS_URL") == "" && bot.LocalRedisDir(e.getenv) == "" {
		return fmt.Errorf("%s reads the bot's Redis, and REDIS_URL is not set (the embedded Redis starts empty). "+
			"Point it at the Redis the bot uses, e.g. REDIS_URL=redis://localhost:6379/0 bot %s", name, name)
	}
	return nil
}
