package mcp_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/tools/mcp"
)

// A server whose program is not there is down with the system's word for
// it, as when the bot started it itself (on Linux, a reaper starts it,
// and tells the bot why it could not: reaper_linux.go).
func TestServerProgramThatIsNotThere(t *testing.T) {
	m := newManager(t, "mcp_servers:\n  broken:\n    command: [/nonexistent/mcp-server, --stdio]\n", mcp.Options{MinBackoff: time.Hour})
	m.Tools()
	want := "mcp broken: down: fork/exec /nonexistent/mcp-server: no such file or directory"
	if d := m.Describe(); !strings.Contains(d, want) {
		t.Errorf("Describe() = %q, want %q", d, want)
	}
}

// A server that exits (it crashed, or gave up) leaves nothing behind on
// Linux: not even a process of its that left its group and session and
// ignores SIGTERM, as a daemon it started would.
func TestServerLeavesNothingBehind(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only on Linux does a reaper end what a server leaves behind")
	}
	pidFile := filepath.Join(sharedDir(t), "pid")
	// $$$$: the policy reads $$ as a $.
	script := `setsid sh -c 'trap "" TERM; echo $$$$ > ` + pidFile + `; exec sleep 300' & ` +
		`while [ ! -s ` + pidFile + ` ]; do sleep 0.05; done; echo "giving up" >&2; exit 3`
	m := newManager(t, "mcp_servers:\n  quitter:\n    command: [/bin/sh, -c, "+strconv.Quote(script)+"]\n", mcp.Options{MinBackoff: time.Hour})
	m.Tools()
	if d := m.Describe(); !strings.Contains(d, "mcp quitter: down: ") || !strings.Contains(d, "giving up") {
		t.Errorf("Describe() = %q, want the server down with its last words", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	stray, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the stray's pid %q: %v", b, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for running(stray) {
		if time.Now().After(deadline) {
			t.Fatalf("the process %d the server left behind still runs 20 s after the server exited", stray)
		}
		time.Sleep(20 * time.Millisecond) // polling /proc for it to end
	}
}

// running reports whether pid is a process that has not ended (a zombie
// has).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// When memory runs out, the kernel ends a server's processes before the
// bot: the server, what it starts and its reaper have a higher
// oom_score_adj than the bot.
func TestServerIsTheOOMKillersFirstChoice(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only on Linux does a reaper start the server")
	}
	own := oomScoreAdj(t, "/proc/self/oom_score_adj")
	adj := filepath.Join(sharedDir(t), "adj")
	// $$PPID: the policy reads $$ as a $; the server's parent is its
	// reaper.
	script := `{ cat /proc/self/oom_score_adj; cat /proc/$$PPID/oom_score_adj; } > ` + adj + `.tmp && mv ` + adj + `.tmp ` + adj + `; ` +
		`echo "giving up" >&2; exit 3`
	m := newManager(t, "mcp_servers:\n  hog:\n    command: [/bin/sh, -c, "+strconv.Quote(script)+"]\n", mcp.Options{MinBackoff: time.Hour})
	m.Tools()
	if d := m.Describe(); !strings.Contains(d, "giving up") {
		t.Fatalf("Describe() = %q, want the server down with its last words", d)
	}
	b, err := os.ReadFile(adj)
	if err != nil {
		t.Fatalf("the server did not say its oom_score_adj: %v", err)
	}
	got := strings.Fields(string(b))
	raised := strconv.Itoa(min(own+500, 1000))
	if want := []string{raised, raised}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("oom_score_adj of a process the server started, and of its reaper = %q, want %q (the bot's is %d)", got, want, own)
	}
}

// oomScoreAdj reads an oom_score_adj file.
func oomScoreAdj(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
