package mcp_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/tools/mcp"
)

// workParent is where the servers' working directories are made: the
// home of the account they run as (nobody's, the bot being root), else
// the bot's own directory under $TMPDIR.
func workParent() string {
	if os.Geteuid() == 0 {
		return filepath.Join(os.TempDir(), "countersign-mcp", mcp.DefaultServerUser)
	}
	return filepath.Join(os.TempDir(), "countersign-mcp-"+strconv.Itoa(os.Geteuid()))
}

// sharedDir is a directory the test and a server (which may run as
// nobody) both write in.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitGone waits until path is no longer there.
func waitGone(t *testing.T, path, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Lstat(path); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s is still there 20 s after the server ended", what, path)
		}
		time.Sleep(20 * time.Millisecond) // polling for the reaper's removal
	}
}

// A stdio server runs in a working directory of its own, neither the
// bot's nor its home, and what it wrote there goes with it when it
// exits. A server that plants links there to files of someone else's,
// or a directory in the place of another reaper's, gets only its own
// files removed: the links go, what they point to stays.
func TestServerWorkingDirectoryGoesWithIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only on Linux does a reaper give a server a working directory of its own")
	}
	shared := sharedDir(t)
	victim := t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "precious"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	// The stale directories: one of a reaper killed outright (its pid
	// is above any Linux allows), and a link in the place of another.
	script := `pwd > ` + shared + `/cwd.tmp && mv ` + shared + `/cwd.tmp ` + shared + `/cwd; ` +
		`mkdir -p .playwright-mcp && echo page > .playwright-mcp/page.yml && ` +
		`ln -s ` + victim + ` victim-dir && ln -s ` + victim + `/precious victim-file && ` +
		`mkdir ../work-4194399 && echo stale > ../work-4194399/left && ln -s ` + victim + ` ../work-4194398; ` +
		`echo "giving up" >&2; exit 3`
	cwd, _ := os.Getwd()
	m := newManager(t, "mcp_servers:\n  writer:\n    command: [/bin/sh, -c, "+strconv.Quote(script)+"]\n", mcp.Options{MinBackoff: time.Hour})
	m.Tools()
	if d := m.Describe(); !strings.Contains(d, "giving up") {
		t.Fatalf("Describe() = %q, want the server down with its last words", d)
	}
	b, err := os.ReadFile(filepath.Join(shared, "cwd"))
	if err != nil {
		t.Fatalf("the server did not say where it ran: %v", err)
	}
	work := strings.TrimSpace(string(b))
	if filepath.Dir(work) != workParent() || !strings.HasPrefix(filepath.Base(work), "work-") || work == cwd {
		t.Errorf("the server ran in %s, want a work-<pid> directory of its own in %s (the bot's is %s)", work, workParent(), cwd)
	}
	waitGone(t, work, "its working directory")
	if b, err := os.ReadFile(filepath.Join(victim, "precious")); err != nil || string(b) != "keep me" {
		t.Errorf("the file a link of the server's pointed to = %q, %v; want it kept", b, err)
	}

	// The next server to start removes what a reaper that is gone left,
	// links as links.
	m2 := newManager(t, "mcp_servers:\n  next:\n    command: [/bin/sh, -c, \"exit 3\"]\n", mcp.Options{MinBackoff: time.Hour})
	m2.Tools()
	for _, stale := range []string{"work-4194399", "work-4194398"} {
		waitGone(t, filepath.Join(workParent(), stale), "the stale "+stale)
	}
	if _, err := os.Stat(filepath.Join(victim, "precious")); err != nil {
		t.Errorf("the file behind a stale link: %v; want it kept", err)
	}
}

// A server that runs, as the filesystem server does when told to serve
// ".", works in its own directory (the one it names), and its files go
// with it when the bot stops it.
func TestRunningServerFilesGoWhenItStops(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only on Linux does a reaper give a server a working directory of its own")
	}
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  fs:\n    command: [%s, -y, \"@modelcontextprotocol/server-filesystem\", \".\"]\n", npx(t)), mcp.Options{})
	got, err := call(t, m, "fs__list_allowed_directories", `{}`)
	if err != nil {
		t.Fatalf("list_allowed_directories = %v", err)
	}
	var work string
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, workParent()+"/work-") {
			work = strings.TrimSpace(line)
		}
	}
	if work == "" {
		t.Fatalf("list_allowed_directories = %q, want a work-<pid> directory in %s", got, workParent())
	}
	page := filepath.Join(work, "page.yml")
	if _, err := call(t, m, "fs__write_file", fmt.Sprintf(`{"path":%q,"content":"- heading: Quarterly numbers"}`, page)); err != nil {
		t.Fatalf("write_file = %v", err)
	}
	if b, err := os.ReadFile(page); err != nil || !strings.Contains(string(b), "Quarterly") {
		t.Fatalf("the file the server wrote = %q, %v", b, err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	waitGone(t, work, "its working directory")
}
