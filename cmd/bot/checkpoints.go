package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/termtext"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

const checkpointsUsage = `usage: bot checkpoints list|show|fork|delete --thread ID [flags]

  bot checkpoints list   --thread ID [--wide|--json]                   a thread's history: status, step, waiting calls
  bot checkpoints show   --thread ID [--checkpoint CP] [--json]        one checkpoint (default the latest) with its state
  bot checkpoints fork   --thread ID --checkpoint CP [--to NEW] [--json] copy a checkpoint into a new thread
  bot checkpoints delete --thread ID [--yes]                           remove a thread and everything kept for it

Threads live in the Redis of REDIS_URL (unset: the local Redis of the state
directory; "bot threads list" names them). A forked thread is driven like
any other, e.g. with: bot chat --thread NEW
`

// checkpoints is the operator's view of the checkpoints in Redis.
func checkpoints(ctx context.Context, args []string, e env) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		if len(args) == 0 {
			return errors.New("checkpoints: name a subcommand: list, show, fork or delete (bot checkpoints --help shows them)")
		}
		fmt.Fprint(e.stdout, checkpointsUsage+helpText["checkpoints"])
		return nil
	}
	sub, args := args[0], args[1:]
	fs := flags("checkpoints "+sub, "checkpoints "+sub+" --thread ID [flags]", e)
	thread := fs.String("thread", "", "the thread (bot threads list names them)")
	var cpID, to *string
	var asJSON, yes, wide *bool
	switch sub {
	case "list":
		asJSON = fs.Bool("json", false, "print JSON")
		wide = fs.Bool("wide", false, "print every column whole instead of fitting the terminal")
	case "show":
		cpID = fs.String("checkpoint", "", "a checkpoint ID from list (default the latest)")
		asJSON = fs.Bool("json", false, "print JSON")
	case "fork":
		cpID = fs.String("checkpoint", "", "the checkpoint ID to fork, from list")
		to = fs.String("to", "", "the new thread (default <thread>/fork-<checkpoint>)")
		asJSON = fs.Bool("json", false, "print JSON")
	case "delete":
		yes = fs.Bool("yes", false, "delete without asking")
	default:
		return fmt.Errorf("checkpoints: unknown subcommand %q: the subcommands are list, show, fork and delete (bot checkpoints --help)", sub)
	}
	if err := parse(fs, args, e); err != nil {
		return err
	}
	if *thread == "" {
		return fmt.Errorf("checkpoints %s: --thread is required (bot threads list names the threads)", sub)
	}
	if err := needRedis(e, "checkpoints"); err != nil {
		return err
	}
	e, flush := escapedTerminal(e)
	defer flush()
	log, err := newLogger(e.getenv, e.stderr, logrus.WarnLevel)
	if err != nil {
		return err
	}
	quiet := runner.ReporterFunc(func(context.Context, runner.Event) error { return nil })
	svc, err := newService(ctx, e.getenv, log, nil, nil, func(*redisstore.Store) runner.Reporter { return quiet })
	if err != nil {
		return err
	}
	defer svc.Close()
	stdout := e.stdout
	switch sub {
	case "list":
		hist, err := svc.Store.History(ctx, *thread)
		if errors.Is(err, graph.ErrNoCheckpoint) || (err == nil && len(hist) == 0) {
			return noThread(*thread)
		}
		if err != nil {
			return err
		}
		if *asJSON {
			masked, err := maskedJSON(hist)
			if err != nil {
				return err
			}
			return writeJSONTo(stdout, masked)
		}
		// The checkpoint ID is kept whole: fork and show take it.
		tab := newTable("CHECKPOINT", "SEQ", "STEP", "STATUS", "NEXT", "WAITING", "MSGS", "CREATED").shrinks(4, 5)
		for _, cp := range hist {
			tab.add(termtext.Line(cp.ID), fmt.Sprint(cp.Seq), fmt.Sprint(cp.Step), cp.Status.String(),
				termtext.Line(orNone(strings.Join(cp.Next, ","))), termtext.Line(waitingCalls(cp)), fmt.Sprint(cp.JournalLen), cp.Created.UTC().Format("01-02 15:04:05"))
		}
		width := termWidth(e.getenv)
		if *wide {
			width = 0
		}
		return tab.write(stdout, width)
	case "show":
		cp, messages, err := loadCheckpoint(ctx, svc, *thread, *cpID)
		if err != nil {
			return err
		}
		var st agent.State
		if err := json.Unmarshal(cp.State, &st); err != nil {
			return fmt.Errorf("checkpoint %s: %w", cp.ID, err)
		}
		if *asJSON {
			masked, err := maskedJSON(map[string]any{"checkpoint": cp, "messages": messages})
			if err != nil {
				return err
			}
			return writeJSONTo(stdout, masked)
		}
		fmt.Fprintf(stdout, "checkpoint %s of %s: seq %d, step %d, %s", cp.ID, cp.Thread, cp.Seq, cp.Step, cp.Status)
		if len(cp.Next) > 0 {
			fmt.Fprintf(stdout, ", next %s", strings.Join(cp.Next, ","))
		}
		fmt.Fprintf(stdout, "\ncreated %s, parent %s\n", cp.Created.UTC().Format(time.RFC3339), orNone(cp.Parent))
		// One line a field: no stored text starts a line of its own.
		if cp.Error != "" {
			fmt.Fprintf(stdout, "error: %s\n", termtext.Line(cp.Error))
		}
		fmt.Fprintf(stdout, "requester %s, channel %s, %d model turns\n", termtext.Line(orNone(st.Requester)), termtext.Line(orNone(st.Channel)), st.Turns)
		for _, c := range st.Calls {
			fmt.Fprintf(stdout, "call %s %s %s %s\n", termtext.Line(c.Key), termtext.Line(c.Tool), c.Status, termtext.Line(string(tools.MaskSecrets(c.Tool, c.RunArgs()))))
		}
		fmt.Fprintf(stdout, "%d messages:\n", len(messages))
		for _, m := range messages {
			text := m.Content
			for _, tc := range m.ToolCalls {
				text += fmt.Sprintf(" [call %s %s]", tc.Name, tools.MaskSecretsText(tc.Name, tc.Arguments))
			}
			if n := len(m.Thinking); n > 0 {
				// The model's working, kept to be sent back to it:
				// counted, not shown (--json has it, under "thinking").
				text += fmt.Sprintf(" [%d thinking blocks kept, not shown]", n)
			}
			fmt.Fprintf(stdout, "  %-9s %s\n", m.Role, oneLine(text, 160))
		}
		return nil
	case "fork":
		g := svc.Runner.Agent().Graph()
		if *cpID == "" {
			return errors.New("checkpoints fork: --checkpoint is required")
		}
		if *to == "" {
			*to = *thread + "/fork-" + *cpID
		}
		if _, _, err := loadCheckpoint(ctx, svc, *thread, *cpID); err != nil {
			return err // no such thread or checkpoint, said as show says it
		}
		cp, err := g.Fork(ctx, *thread, *cpID, *to)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSONTo(stdout, cp)
		}
		fmt.Fprintf(stdout, "forked %s at %s (step %d, %s) into %s\n", *thread, *cpID, cp.Step, cp.Status, *to)
		return nil
	case "delete":
		head, err := svc.Store.Head(ctx, *thread)
		if errors.Is(err, graph.ErrNoCheckpoint) {
			return noThread(*thread)
		}
		if err != nil {
			return err
		}
		if !*yes {
			fmt.Fprintf(stdout, "Delete thread %s (%s, %d messages) and everything kept for it? This cannot be undone. [y/N] ", *thread, head.Status, head.JournalLen)
			answer, _ := bufio.NewReader(e.stdin).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				fmt.Fprintln(stdout, "Nothing deleted.")
				return nil
			}
		}
		if err := svc.Store.Delete(ctx, *thread); err != nil {
			return err
		}
		if err := svc.Store.Forget(ctx, *thread); err != nil {
			return err
		}
		if err := svc.Store.SetWaiting(ctx, *thread, 0); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %s\n", *thread)
		return nil
	}
	return nil
}

// noThread is the one message for a thread the Redis does not have.
func noThread(thread string) error {
	return fmt.Errorf("no thread %q in this Redis (bot threads list names the threads)", thread)
}

// loadCheckpoint returns a checkpoint of the thread (the latest if id is
// "") with the conversation as of it.
func loadCheckpoint(ctx context.Context, svc *bot.Bot, thread, id string) (*graph.Checkpoint, []llm.Message, error) {
	hist, err := svc.Store.History(ctx, thread)
	if errors.Is(err, graph.ErrNoCheckpoint) || (err == nil && len(hist) == 0) {
		return nil, nil, noThread(thread)
	}
	if err != nil {
		return nil, nil, err
	}
	i := 0
	if id != "" {
		i = slices.IndexFunc(hist, func(c *graph.Checkpoint) bool { return c.ID == id })
		if i < 0 {
			return nil, nil, fmt.Errorf("thread %s has no checkpoint %s (bot checkpoints list --thread %s shows them)", thread, id, thread)
		}
	}
	cp := hist[i]
	entries, err := svc.Store.Journal(ctx, thread, cp.JournalLen)
	if err != nil {
		return nil, nil, err
	}
	var st agent.State
	if err := st.UnmarshalJournal(entries); err != nil {
		return nil, nil, err
	}
	return cp, st.Messages, nil
}

// waitingCalls lists a checkpoint's calls that wait for a person.
func waitingCalls(cp *graph.Checkpoint) string {
	var st agent.State
	if err := json.Unmarshal(cp.State, &st); err != nil {
		return "?"
	}
	var out []string
	for _, c := range st.Waiting() {
		out = append(out, c.Key+":"+c.Tool)
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func writeJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
