package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// With nothing configured and redis-server on PATH, the bot keeps its
// threads in a redis-server of its own with its data in the state
// directory: a thread paused in one run, whose bot is then killed,
// resumes in the next run with the same (at first empty) directory, and
// a second process meanwhile is told the directory is in use. The
// server it started dies with it, and answers nothing without its
// password, which is in no file.
func TestPausedThreadSurvivesARestartWithNothingConfigured(t *testing.T) {
	t.Parallel()
	needs(t, "redis-server on PATH (the no-configuration default's local Redis)")
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not on PATH: %v; `make test` installs it", err)
	}
	state := t.TempDir()
	dir := filepath.Join(state, "countersign")
	env := []string{"XDG_STATE_HOME=" + state, "TMPDIR=" + t.TempDir()}

	first := exec.Command(botBinary, "chat")
	first.Env = append([]string{"PATH=" + os.Getenv("PATH"), goRace}, env...)
	stdin, err := first.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	first.Stdout, first.Stderr = out, out
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	if _, err := io.WriteString(stdin, "fetch https://example.com\n"); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, "[a]pprove")
	m := regexp.MustCompile(`Thread (chat-[0-9a-f]+)\.`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("bot chat named no thread:\n%s", out.String())
	}
	thread := m[1]
	if s := out.String(); !strings.Contains(s, "local redis-server") || !strings.Contains(s, dir) || strings.Contains(s, "embedded") {
		t.Errorf("bot chat with nothing configured said:\n%s\nwant it to name the local redis-server and %s", s, dir)
	}

	// Another bot or an operator command meanwhile is told, in one line,
	// who holds the directory and what to do.
	if got, code := runBot(t, env, "", "threads", "list"); code != 1 || strings.Count(strings.TrimSpace(got), "\n") != 0 ||
		!strings.Contains(got, "the local Redis is in use") || !strings.Contains(got, dir) ||
		!strings.Contains(got, "Stop that bot first") || !strings.Contains(got, "XDG_STATE_HOME") {
		t.Errorf("bot threads list beside the running bot (exit %d):\n%s\nwant one line naming %s and what to do", code, got, dir)
	}

	// Its Redis wants the password, and only the owner reads the directory.
	addr, err := os.ReadFile(filepath.Join(dir, "server"))
	if err != nil {
		t.Fatal(err)
	}
	open := redis.NewClient(&redis.Options{Addr: strings.TrimSpace(string(addr)), MaxRetries: -1})
	defer open.Close()
	if err := open.Set(context.Background(), "cs:claim", "forged", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a write without the password = %v, want NOAUTH", err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want mode 0700", dir, fi.Mode(), err)
	}
	// The password is in no file: a stdio MCP server of the bot's user
	// could read it there.
	if _, err := os.Stat(filepath.Join(dir, "password")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s/password: %v; want no such file", dir, err)
	}

	// Killed as a crash would: its server goes too, letting go of the
	// directory.
	_ = first.Process.Kill()
	_ = first.Wait()
	lock, err := os.Open(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			t.Fatalf("the state directory is still locked after the bot was killed (%v): its redis-server lives on", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The next run, configured no more than the first, resumes it.
	got, code := runBot(t, env, "r\nnot now\n", "chat", "--thread", thread)
	if code != 0 || !strings.Contains(got, "Resuming thread "+thread) || strings.Contains(got, "no thread") ||
		!strings.Contains(got, "example.com") || !strings.Contains(got, "[a]pprove") {
		t.Errorf("bot chat --thread %s after a restart (exit %d):\n%s\nwant the paused call of the first run", thread, code, got)
	}
}

// waitOutput waits until out holds s.
func waitOutput(t *testing.T, out *syncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %q; output:\n%s", s, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
