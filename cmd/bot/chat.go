package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// chatLogPath is where bot chat writes its log by default: chat.log in
// the state directory, which is the user's own (0700), or without one a
// file of the user's own in the temporary directory. A fixed name there
// would be the first user's: another one's chat could not open it.
func chatLogPath(getenv func(string) string) string {
	if dir := bot.StateDir(getenv); dir != "" {
		return filepath.Join(dir, "chat.log")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("countersign-chat-%d.log", os.Getuid()))
}

// chat is the terminal front end: a conversation with the agent in which
// every pending tool call is approved, edited or rejected at a prompt.
// Quitting during a pause and starting again with --thread resumes it
// (with a REDIS_URL; the embedded Redis forgets everything on exit).
func chat(ctx context.Context, args []string, e env) error {
	fs := flags("chat", "chat [--thread ID] [--user NAME] [--log FILE]", e)
	thread := fs.String("thread", "", "resume this thread instead of starting a new one")
	user := fs.String("user", "", "who you are in the conversation, as the policy's approvers name people (default $USER)")
	logPath := fs.String("log", chatLogPath(e.getenv), "where the bot's log lines go, so that they stay out of the conversation")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	if *user == "" {
		*user = e.getenv("USER")
	}
	if *user == "" {
		*user = "you"
	}
	if dir := bot.StateDir(e.getenv); dir != "" && filepath.Dir(*logPath) == dir {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("chat log: %w", err)
		}
	}
	logFile, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("chat log: %w", err)
	}
	defer logFile.Close()
	log, err := newLogger(e.getenv, logFile, logrus.InfoLevel)
	if err != nil {
		return err
	}
	// What the chat prints holds text from the model, tools, fetched
	// pages and people: escaped for the terminal, like every operator
	// command's output.
	e, flush := escapedTerminal(e)
	defer flush()
	term := &terminal{out: e.stdout, in: bufio.NewScanner(e.stdin)}
	svc, err := newService(ctx, e.getenv, log, nil, nil, func(*redisstore.Store) runner.Reporter { return term })
	if err != nil {
		return err
	}
	defer svc.Close()

	term.printf("Countersign chat · model: %s · redis: %s · %s · log: %s\n", svc.Model.Name(), svc.Redis, policyInForce(e.getenv), *logPath)
	c := &chatSession{svc: svc.Runner, term: term, user: *user, thread: *thread,
		embedded: e.getenv("REDIS_URL") == "" && bot.LocalRedisDir(e.getenv) == "", local: bot.LocalRedisDir(e.getenv)}
	if c.thread == "" {
		c.thread = "chat-" + randomHex(4)
		term.printf("Thread %s. Type a request; Ctrl-D quits.\n", c.thread)
	} else if _, err := svc.Runner.State(ctx, c.thread); errors.Is(err, runner.ErrNoThread) {
		term.printf("There is no thread %s in this Redis: a request starts it.\n", c.thread)
		if c.embedded {
			term.printf("REDIS_URL is not set, so this is the embedded Redis, which keeps nothing across runs: " +
				"to resume a thread, run every chat with the same REDIS_URL, e.g. REDIS_URL=redis://localhost:6379/0.\n")
		} else if c.local != "" {
			term.printf("REDIS_URL is not set, so this is the local redis-server with its data in %s: "+
				"if the thread was started on another Redis, set REDIS_URL to it.\n", c.local)
		} else {
			term.printf("If it was started before, check that REDIS_URL is the Redis it was started on.\n")
		}
	} else {
		term.printf("Resuming thread %s.\n", c.thread)
	}
	return c.loop(ctx)
}

type chatSession struct {
	svc    *runner.Service
	term   *terminal
	user   string
	thread string
	// embedded is whether the Redis is the embedded one, which keeps
	// nothing after the process exits.
	embedded bool
	// local is the state directory of the local redis-server, when that
	// is the Redis (REDIS_URL unset, redis-server on PATH).
	local string
}

// loop reads what the person types and acts on the thread's state until
// they quit.
func (c *chatSession) loop(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			return nil
		}
		res, err := c.svc.State(ctx, c.thread)
		switch {
		case errors.Is(err, runner.ErrNoThread):
			text, ok := c.term.ask("you> ")
			if !ok {
				return nil
			}
			if text == "" {
				continue
			}
			if err := c.svc.Start(ctx, runner.StartRequest{Thread: c.thread, Requester: c.user, Text: text}); err != nil {
				return err
			}
			continue
		case err != nil:
			return err
		}
		if changes, err := c.svc.Changed(ctx, c.thread); err == nil && len(changes) > 0 && res.Status() != graph.Done {
			if !c.changed(ctx, &res.State, changes) {
				return nil
			}
			continue
		}
		var quit bool
		switch res.Status() {
		case graph.Paused:
			quit, err = c.decide(ctx, &res.State)
		case graph.Done:
			text, ok := c.term.ask("you> ")
			if !ok {
				return nil
			}
			if text != "" {
				err = c.svc.Reply(ctx, runner.Message{Thread: c.thread, By: c.user, Text: text})
			}
		case graph.Failed:
			c.term.printf("The last run failed: %s\n", res.Checkpoint.Error)
			if res.Checkpoint.Final {
				c.term.printf("Retrying would fail the same way. Start a new chat to go on; if it fails there too, tell whoever runs the bot.\n")
				return nil
			}
			answer, ok := c.term.ask("[r]etry or [q]uit> ")
			if !ok || answer == "q" {
				return nil
			}
			if answer == "r" {
				err = c.svc.Retry(ctx, runner.Message{Thread: c.thread, By: c.user})
			}
		case graph.Running:
			err = c.svc.Drive(ctx, c.thread) // a run cut off earlier
		}
		if quit {
			if c.embedded {
				c.term.printf("Bye. REDIS_URL is not set, so this thread is gone with the embedded Redis; "+
					"to keep a paused thread, chat with REDIS_URL set (e.g. REDIS_URL=redis://localhost:6379/0 %s chat) "+
					"and resume it with --thread.\n", selfCommand())
			} else if c.local != "" {
				c.term.printf("Bye. Resume with: %s chat --thread %s (the thread is kept in %s)\n", selfCommand(), c.thread, c.local)
			} else {
				c.term.printf("Bye. Resume with the same REDIS_URL: %s chat --thread %s\n", selfCommand(), c.thread)
			}
			return nil
		}
		if err != nil {
			c.term.printf("error: %v\n", err)
		}
	}
}

// decide asks about each waiting call, then lets the run go on. Every
// answer goes through the runner, which applies the policy as it does to
// a click in Slack.
func (c *chatSession) decide(ctx context.Context, st *agent.State) (quit bool, err error) {
	for _, call := range st.Waiting() {
		gate, err := c.svc.Gate(ctx, c.thread, st, call)
		if err != nil {
			return false, err
		}
		c.term.card(call, gateLines(call, gate, c.user, c.thread)...)
		for {
			d, ok := c.ask(call, gate)
			// The terminal shows the thread itself: it decides where the
			// thread is.
			d.Team, d.Channel = st.Team, st.Channel
			if !ok {
				return true, nil
			}
			err := c.svc.Decide(ctx, d)
			var invalid *runner.InvalidArgsError
			var refused *runner.RefusedError
			switch {
			case errors.As(err, &invalid):
				c.term.printf("Those arguments will not do: %v\n", invalid.Err)
				continue
			case errors.As(err, &refused):
				c.term.printf("You can't decide this call: %s.\n", refusalText(refused))
			case err != nil:
				c.term.printf("error: %s\n", plainText(err.Error()))
			}
			break
		}
	}
	return false, c.svc.Drive(ctx, c.thread)
}

// ask reads one decision on call. It offers what gate offers (the
// runner refuses the rest all the same), and asks to confirm an approval
// when the rule says so.
func (c *chatSession) ask(call agent.Call, gate *runner.Gate) (runner.Decision, bool) {
	choices := "[a]pprove [e]dit [r]eject [q]uit> "
	offers := func(agent.Kind) bool { return true }
	if call.Status == agent.Unknown {
		choices = "[a] retry [m]ark done [r] skip [q]uit> "
	} else if gate != nil {
		offers = gate.Offers
		var opts []string
		if !gate.Approved(c.user) {
			opts = append(opts, "[a]pprove")
		}
		if offers(agent.Edit) {
			opts = append(opts, "[e]dit")
		}
		if offers(agent.Reject) || gate.Requester == c.user {
			opts = append(opts, "[r]eject")
		}
		choices = strings.Join(append(opts, "[q]uit> "), " ")
	}
	for {
		answer, ok := c.term.ask(choices)
		if !ok || answer == "q" {
			return runner.Decision{}, false
		}
		d := runner.Decision{Thread: c.thread, Call: call.Key, Round: call.Attempts, Hash: call.RunHash(), By: c.user}
		switch answer {
		case "a":
			d.Kind = agent.Approve
			if gate != nil && gate.Confirm && call.Status == agent.Pending {
				sure, ok := c.term.ask(fmt.Sprintf("Approve %s: %s? [y/N]> ", call.Tool, confirmTarget(call)))
				if !ok {
					return runner.Decision{}, false
				}
				if sure != "y" && sure != "yes" {
					continue
				}
			}
		case "m":
			d.Kind = agent.MarkDone
		case "r":
			d.Kind = agent.Reject
			d.Reason, ok = c.term.ask("reason (optional)> ")
			if !ok {
				return runner.Decision{}, false
			}
		case "e":
			if call.Status == agent.Pending && !offers(agent.Edit) {
				continue
			}
			d.Kind = agent.Edit
			args, ok := c.term.ask("new arguments as one line of JSON> ")
			if !ok {
				return runner.Decision{}, false
			}
			d.Args = json.RawMessage(args)
		default:
			continue
		}
		return d, true
	}
}

// slackMention is a Slack mention, <@U123>, which the terminal shows as
// @U123.
var slackMention = regexp.MustCompile(`<@([A-Za-z0-9._-]+)>`)

// plainText turns the Slack markup in the runner's and the model's words
// into text: mentions become @U123, and a quote's "> " its text.
func plainText(s string) string {
	s = slackMention.ReplaceAllString(s, "@$1")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "> ")
	}
	return strings.Join(lines, "\n")
}

// indentLines puts prefix at the start of every line of s but the first,
// which follows the chat's own words ("agent> ", "│ reason: "): a line of
// the model's text never starts where the chat's own lines do, so it
// cannot pass for one ("✔ … approved by", "… running").
func indentLines(s, prefix string) string {
	return strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// termPeople names people in the terminal: the names the chat's --user
// gives them, as @name.
func termPeople(ids []string) string {
	if len(ids) == 0 {
		return "someone"
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = "@" + plainText(id)
	}
	return strings.Join(out, ", ")
}

// refusalText is a refusal in the terminal's words: people as @name,
// channels as #ID.
func refusalText(r *runner.RefusedError) string {
	return r.Render(plainText, termPeople, func(id string) string { return "#" + plainText(id) })
}

// terminal prints events and reads answers. It is the chat's
// runner.Reporter.
type terminal struct {
	mu  sync.Mutex
	out io.Writer
	in  *bufio.Scanner
}

func (t *terminal) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, format, args...)
}

// ask prints a prompt and reads a line; false at end of input.
func (t *terminal) ask(prompt string) (string, bool) {
	t.printf("%s", prompt)
	if !t.in.Scan() {
		t.printf("\n")
		return "", false
	}
	return strings.TrimSpace(t.in.Text()), true
}

func (t *terminal) card(c agent.Call, more ...string) {
	title := "Approval needed"
	if c.Status == agent.Unknown {
		title = "Outcome unknown (the bot stopped while this call was running)"
	}
	var args bytes.Buffer
	if err := json.Indent(&args, tools.MaskSecrets(c.Tool, c.RunArgs()), "│   ", "  "); err != nil {
		args.Write(tools.MaskSecrets(c.Tool, c.RunArgs()))
	}
	t.printf("┌ %s: %s [%s]\n", title, c.Tool, c.Key)
	if c.Reason != "" {
		t.printf("│ reason: %s\n", indentLines(plainText(c.Reason), "│         "))
	}
	t.printf("│ arguments:\n│   %s\n", args.String())
	t.printf("│ hash: sha256:%s (what an approval runs)\n", tools.ShortHash(c.RunHash()))
	if !c.Expires.IsZero() {
		t.printf("│ expires: %s\n", c.Expires.Local().Format("2006-01-02 15:04 MST"))
	}
	for _, l := range more {
		t.printf("│ %s\n", l)
	}
	t.printf("└\n")
}

// gateLines are what the card of a call that needs several approvals
// shows besides: the approvals so far, who may still give them, and an
// edit's reset.
func gateLines(c agent.Call, g *runner.Gate, user, thread string) []string {
	if g == nil || g.Required < 2 {
		return nil
	}
	var lines []string
	if c.Revision > 0 {
		lines = append(lines, "approvals reset: the arguments were edited by "+c.EditedBy)
	}
	lines = append(lines, approvalsText(g))
	if g.Approved(user) {
		lines = append(lines, fmt.Sprintf("you approved it; the others approve with: %s chat --thread %s --user NAME", selfCommand(), thread))
	}
	return lines
}

// approvalsText is a quorum's progress: "1 of 2 approvals: bob; still to
// approve: carol, dave".
func approvalsText(g *runner.Gate) string {
	var who []string
	for _, a := range g.Approvals {
		who = append(who, a.By)
	}
	text := fmt.Sprintf("%d of %d approvals", len(g.Approvals), g.Required)
	if len(who) > 0 {
		text += ": " + strings.Join(who, ", ")
	}
	if still := g.StillToApprove(); len(still) > 0 {
		text += "; still to approve: " + strings.Join(still, ", ")
	}
	return text
}

// confirmTarget says in one line, whole, what a call acts on, for the
// confirmation.
func confirmTarget(c agent.Call) string {
	args := tools.MaskSecrets(c.Tool, c.RunArgs())
	var a struct{ Method, URL string }
	if c.Tool == tools.HTTPRequestName && json.Unmarshal(args, &a) == nil && a.URL != "" {
		return a.Method + " " + a.URL
	}
	var b bytes.Buffer
	if json.Compact(&b, args) == nil {
		return b.String()
	}
	return string(args)
}

// Report implements runner.Reporter.
func (t *terminal) Report(_ context.Context, e runner.Event) error {
	switch e.Kind {
	case runner.Answer:
		t.printf("agent> %s\n", indentLines(plainText(e.Text), "       "))
	case runner.ApprovalProgress:
		if e.Gate != nil {
			if e.Call.Revision > 0 && len(e.Gate.Approvals) == 0 {
				t.printf("✏ %s [%s] arguments edited by %s; approvals reset\n", e.Call.Tool, e.Call.Key, e.Call.EditedBy)
			} else {
				t.printf("☑ %s [%s] %s\n", e.Call.Tool, e.Call.Key, approvalsText(e.Gate))
			}
		}
	case runner.CallDecided:
		d := e.Call.Decision
		if d.Kind == agent.Expire {
			t.printf("⌛ %s [%s] expired\n", e.Call.Tool, e.Call.Key)
		} else {
			t.printf("✔ %s [%s] %s by %s\n", e.Call.Tool, e.Call.Key, d.Kind.Past(), strings.Join(d.Approvers(), ", "))
		}
	case runner.CallStarted:
		t.printf("… running %s [%s]\n", e.Call.Tool, e.Call.Key)
	case runner.CallFinished:
		result := e.Call.Result
		if e.Call.Editor() != "" && strings.HasPrefix(result, "Note: ") {
			_, result, _ = strings.Cut(result, "\n") // the model's note: the terminal showed the edit
		}
		first, _, _ := strings.Cut(result, "\n")
		t.printf("  %s [%s] %s: %s\n", e.Call.Tool, e.Call.Key, e.Call.Status, plainText(first))
	case runner.RunFailed:
		t.printf("✖ the run failed: %s\n", indentLines(plainText(e.Text), "  "))
	case runner.GraphChanged:
		t.printf("🔄 the bot was updated while this request waited: %s\n", strings.ReplaceAll(e.Text, "\n", "; "))
	case runner.RunCancelled:
		t.printf("✖ cancelled by %s: the bot was updated while this request waited\n", termPeople(e.People))
	}
	return nil
}

// selfCommand is how to run this program again: "go run ./cmd/bot" when
// it was started by go run (whose binary is gone once it exits), else its
// own name.
func selfCommand() string {
	if strings.Contains(os.Args[0], "go-build") {
		return "go run ./cmd/bot"
	}
	return filepath.Base(os.Args[0])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
