package main

import (
	"fmt"
	"os"

	"github.com/countersign/countersign/tools/mcp"
)

// closeProc makes the bot non-dumpable before anything else runs, so
// that no process of its user, tool servers included, reads its
// environment or memory through /proc (see mcp.NonDumpable). The bot
// starts its stdio servers only if this worked or they run as another
// user.
func closeProc() {
	if err := mcp.NonDumpable(); err != nil {
		fmt.Fprintln(os.Stderr, "bot: warning: cannot make the process non-dumpable:", err)
	}
}
