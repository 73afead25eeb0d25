//go:build !linux

package mcp

import (
	"os/exec"
	"time"
)

// reaperGrace is 0: only Linux can tie a process's life to the bot's
// (reaper_linux.go), so elsewhere the bot starts a server itself, and a
// bot killed outright leaves a server that does not exit at the end of
// its input running.
func reaperGrace(time.Duration) time.Duration { return 0 }

// startServer starts cmd, a stdio server's command, in cmd.Dir: only the
// reaper makes a server a working directory of its own.
func startServer(cmd *exec.Cmd, _ time.Duration, _ string) error { return cmd.Start() }
