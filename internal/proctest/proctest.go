// Package proctest finds the processes a test started, for tests that
// kill a child's child (an MCP server a bot started) as a crash would.
// It reads /proc, so it works on Linux only.
package proctest

import (
	"os"
	"strconv"
	"strings"
)

// Descendants returns the processes below this one whose command line
// contains s.
func Descendants(s string) []int {
	parent := map[int]int{}
	cmdline := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		parent[pid], _ = strconv.Atoi(fields[1])
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		cmdline[pid] = string(b)
	}
	self := os.Getpid()
	var out []int
	for pid, cmd := range cmdline {
		if !strings.Contains(cmd, s) {
			continue
		}
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == self {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
