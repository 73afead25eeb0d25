package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bot chat's log is the user's own: in the state directory when there is
// one, else a file named for the user in the temporary directory; never
// one fixed name in a directory every user shares, which the first user
// to chat would own and every other one fail to open.
func TestChatLogIsTheUsersOwn(t *testing.T) {
	t.Parallel()
	// PATH has no redis-server: the embedded Redis, which starts nothing.
	state, tmp, empty := t.TempDir(), t.TempDir(), t.TempDir()
	out, code := runBot(t, []string{"XDG_STATE_HOME=" + state, "TMPDIR=" + tmp, "PATH=" + empty}, "", "chat")
	want := filepath.Join(state, "countersign", "chat.log")
	if code != 0 || !strings.Contains(out, "log: "+want) {
		t.Fatalf("bot chat with a state directory (exit %d):\n%s\nwant its log in %s", code, out, want)
	}
	if fi, err := os.Stat(want); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("chat log %s: %v, %v; want a file only its user reads", want, fi, err)
	}
	if fi, err := os.Stat(filepath.Dir(want)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state directory: %v, %v; want it created 0700", fi, err)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("bot chat wrote %v to the shared temporary directory, with a state directory to write to", entries)
	}

	// Without a state directory (no HOME, no XDG_STATE_HOME): the
	// temporary directory, under a name of the user's own.
	out, code = runBot(t, []string{"TMPDIR=" + tmp, "PATH=" + empty}, "", "chat")
	if code != 0 || strings.Contains(out, "countersign-chat.log") || !strings.Contains(out, "log: "+filepath.Join(tmp, "countersign-chat-")) {
		t.Errorf("bot chat without a state directory (exit %d):\n%s\nwant a log of the user's own in %s", code, out, tmp)
	}
}
