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
	var out []int
	for _, p := range Below(os.Getpid()) {
		if strings.Contains(p.Cmdline, s) {
			out = append(out, p.Pid)
		}
	}
	return out
}

// Matching returns the processes on the host that have not ended whose
// command line contains s, wherever they are: a process whose parent
// ended is no longer below the test.
func Matching(s string) []Proc {
	var out []Proc
	for _, pr := range procs() {
		if pr.State != "Z" && pr.State != "X" && strings.Contains(pr.Cmdline, s) {
			out = append(out, pr.Proc)
		}
	}
	return out
}

// Proc is a process as /proc shows it.
type Proc struct {
	Pid, Pgid int
	// State is its state letter: R, S, D, Z (a zombie: it has ended,
	// and its parent has yet to collect it), …
	State   string
	Cmdline string // its arguments, separated by spaces
}

// Below returns the processes below pid (its children, theirs, …).
func Below(pid int) []Proc {
	all := procs()
	kids := map[int][]int{}
	for p, pr := range all {
		kids[pr.ppid] = append(kids[pr.ppid], p)
	}
	var out []Proc
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range kids[p] {
			out = append(out, all[c].Proc)
			queue = append(queue, c)
		}
	}
	return out
}

// Running returns the processes that have not ended among pids, and
// those in the process groups groups.
func Running(pids, groups []int) []Proc {
	var out []Proc
	for _, pr := range procs() {
		if pr.State == "Z" || pr.State == "X" {
			continue
		}
		for _, p := range pids {
			if pr.Pid == p {
				out = append(out, pr.Proc)
				break
			}
		}
		for _, g := range groups {
			if pr.Pgid == g && !contains(out, pr.Pid) {
				out = append(out, pr.Proc)
				break
			}
		}
	}
	return out
}

func contains(ps []Proc, pid int) bool {
	for _, p := range ps {
		if p.Pid == pid {
			return true
		}
	}
	return false
}

type proc struct {
	Proc
	ppid int
}

// procs reads every process in /proc.
func procs() map[int]proc {
	out := map[int]proc{}
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
		// pid (comm) state ppid pgrp …; comm may hold spaces.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 3 {
			continue
		}
		p := proc{Proc: Proc{Pid: pid, State: fields[0]}}
		p.ppid, _ = strconv.Atoi(fields[1])
		p.Pgid, _ = strconv.Atoi(fields[2])
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		out[pid] = p
	}
	return out
}
