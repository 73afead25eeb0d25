package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/proctest"
	"github.com/countersign/countersign/llm/llmtest"
)

// A stdio server's whole process tree ends with the bot, however the
// bot ends: killed outright (SIGKILL, as the OOM killer does) or stopped;
// and the working directory of each server goes with it.
// The servers: server-everything from npm, run by npx (npm exec, then
// sh, then node), and the spy, which starts a stray that leaves its
// process group and session and ignores SIGTERM.
func TestMCPServersEndWithTheBot(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("only Linux ties a process's life to the bot's; elsewhere a killed bot leaves its servers running (docs/tools.md)")
	}
	for _, end := range []string{"killed", "stopped"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			npx, home := npxForBot(t, "an MCP server from npm")
			env := ""
			if home != "" {
				env = "\n    env: {" + home + "}"
			}
			// The spy may run as nobody: it writes its pids where anyone may.
			dir, err := os.MkdirTemp("", "spy-pids-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			pidFile := filepath.Join(dir, "pids")
			h := newHarness(t, `mcp_servers:
  everything:
    command: [`+npx+`, -y, "@modelcontextprotocol/server-everything"]`+env+`
  spy:
    command: [`+spyServer(t)+`]
    env: {MCPSPY_PIDS: "`+pidFile+`", MCPSPY_STRAY: "1"}
`)
			h.model.Then(llmtest.Reply("Hello."))
			h.command("hello", nil, nil) // the tools are needed: the servers start
			var procs []proctest.Proc
			var spies []int
			h.eventually(func() bool {
				spies = readPids(pidFile)
				procs = proctest.Below(h.bot.Process.Pid)
				node := slices.ContainsFunc(procs, func(p proctest.Proc) bool {
					return strings.HasPrefix(p.Cmdline, "node ") && strings.Contains(p.Cmdline, "server-everything")
				})
				return node && len(spies) == 2
			}, "both servers to run: node under npx, the spy and its stray")
			for _, pid := range spies {
				if !slices.ContainsFunc(procs, func(p proctest.Proc) bool { return p.Pid == pid }) {
					t.Fatalf("the spy's process %d is not below the bot: %v", pid, procs)
				}
			}
			// Each server works in a directory of its own, which goes
			// with it: the spy's, and node's under npx.
			var works []string
			for _, p := range procs {
				if p.Pid == spies[0] || strings.HasPrefix(p.Cmdline, "node ") && strings.Contains(p.Cmdline, "server-everything") {
					cwd, err := os.Readlink("/proc/" + strconv.Itoa(p.Pid) + "/cwd")
					if err != nil || !strings.HasPrefix(filepath.Base(cwd), "work-") {
						t.Fatalf("the server %d (%s) works in %q, %v; want a work-<pid> directory of its own", p.Pid, p.Cmdline, cwd, err)
					}
					works = append(works, cwd)
				}
			}
			var pids, groups []int
			for _, p := range procs {
				pids = append(pids, p.Pid)
				if !slices.Contains(groups, p.Pgid) && p.Pgid != syscall.Getpgrp() {
					groups = append(groups, p.Pgid)
				}
			}
			if end == "killed" {
				h.kill()
			} else {
				h.stop()
			}
			var left []proctest.Proc
			deadline := time.Now().Add(20 * time.Second)
			for {
				left = proctest.Running(pids, groups)
				kept := slices.DeleteFunc(slices.Clone(works), func(dir string) bool {
					_, err := os.Lstat(dir)
					return os.IsNotExist(err)
				})
				if len(left) == 0 && len(kept) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("20 s after the bot was %s, its servers' processes still run: %s\n(all there were: %s)\nand their working directories are still there: %v", end, show(left), show(procs), kept)
				}
				time.Sleep(20 * time.Millisecond) // polling /proc for the processes to end, and for the directories' removal
			}
		})
	}
}

// readPids reads the pids the spy wrote, one a line.
func readPids(name string) []int {
	b, _ := os.ReadFile(name)
	var out []int
	for _, line := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(line); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func show(ps []proctest.Proc) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "\n  %d (group %d, %s) %s", p.Pid, p.Pgid, p.State, p.Cmdline)
	}
	return b.String()
}
