// Command bot runs Countersign.
//
//	bot [serve]            serve Slack (the default; see README)
//	bot chat [--thread ID] talk to the agent in the terminal
//
// Configuration comes from the environment (README, "Configuration").
// With nothing configured the bot uses an embedded Redis, whose data is
// lost on exit, and an offline demo model.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bot:", err)
		os.Exit(1)
	}
}

// run dispatches to a subcommand.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "chat"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "chat":
		return chat(ctx, args, getenv, stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}

const usage = `usage:
  bot chat [--thread ID]   talk to the agent in the terminal (the default)

Environment: REDIS_URL, REDIS_CLUSTER, LLM_PROVIDER, LLM_MODEL, OPENAI_API_KEY,
OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, BOT_POLICY, LOG_LEVEL,
LOG_FORMAT (see README).
`
