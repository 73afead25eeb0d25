// Command bot runs Countersign.
//
//	bot [serve]            serve Slack (the default when SLACK_BOT_TOKEN is set)
//	bot [playground]       a simulated Slack channel in the browser (the default otherwise)
//	bot chat [--thread ID] talk to the agent in the terminal
//	bot checkpoints …      list, show, fork and delete a thread's checkpoints
//	bot tools              list the tools offered to the model and their rules
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
	// Without Slack credentials, the playground: a simulated Slack channel
	// in the browser, on the embedded defaults.
	cmd := "playground"
	if getenv("SLACK_BOT_TOKEN") != "" {
		cmd = "serve"
	}
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, getenv, stderr)
	case "playground":
		return playground(ctx, getenv, stdout, stderr)
	case "chat":
		return chat(ctx, args, getenv, stdin, stdout, stderr)
	case "checkpoints":
		return checkpoints(ctx, args, getenv, stdout, stderr)
	case "tools":
		return toolsCmd(ctx, args, getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}

const usage = `usage:
  bot serve                serve Slack: HTTP, or Socket Mode with SLACK_APP_TOKEN
                           (the default when SLACK_BOT_TOKEN is set)
  bot playground           a simulated Slack channel in the browser on BOT_ADDR
                           (the default without SLACK_BOT_TOKEN)
  bot chat [--thread ID]   talk to the agent in the terminal
  bot checkpoints list|show|fork|delete --thread ID [--json]
                           inspect and manage a thread's checkpoints in Redis
  bot tools                list every tool offered to the model (built-in and
                           from BOT_POLICY's MCP servers) and its rule

Environment: SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN, SLACK_API_URL,
BOT_ADDR, REDIS_URL, REDIS_CLUSTER, LLM_PROVIDER, LLM_MODEL, OPENAI_API_KEY,
OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, BOT_POLICY, LOG_LEVEL,
LOG_FORMAT (see README).
`
