package mcp

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A stdio server's files go with it.
//
// Servers write files where they run: Playwright MCP a snapshot of every
// page it visits and its screenshots (.playwright-mcp/), others their
// logs and downloads. Left in the server's home, or in the bot's own
// directory, they would pile up for as long as the bot runs, and keep
// what the model looked at (an intranet page, a customer's record) on
// disk long after anyone needs it. So the reaper starts the server in a
// working directory of its own, work-<the reaper's pid> in the server's
// home (in the bot's when the server runs as the bot's user), owned by
// the server's account and closed to others, and removes it once the
// server and everything it started have ended: when the server exits,
// when the bot stops it, and when the bot dies. A reaper killed
// outright (the OOM killer) cannot; the next reaper to start in that
// home removes the working directories of reapers that are gone.
//
// The server owns its working directory and may put anything there, a
// link to somewhere else included: removal (os.RemoveAll) removes a
// link, never what it points to, and the directory's name is the
// reaper's to choose. HOME stays the home, so that caches such as
// npx's last.

// workPrefix begins the name of a reaper's working directory for its
// server; its pid follows.
const workPrefix = "work-"

// makeWorkdir makes the server's working directory in parent, owned by
// cred's account (the reaper's when cred is nil), after removing those
// of reapers that are gone.
func makeWorkdir(parent string, cred *syscall.Credential) (string, error) {
	sweepWorkdirs(parent)
	dir := filepath.Join(parent, workPrefix+strconv.Itoa(os.Getpid()))
	// A pid is used again: what a reaper of the same pid left is not
	// this server's.
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if cred != nil {
		// Lchown: a link put in dir's place since is not followed.
		if err := os.Lchown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// sweepWorkdirs removes the working directories in parent whose reaper
// is gone: no process has the pid their name ends with, or the one that
// has it is not a reaper.
func sweepWorkdirs(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := strings.CutPrefix(e.Name(), workPrefix)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil || n != os.Getpid() && isReaper(n) {
			continue // not a reaper's name, or its reaper runs
		}
		_ = os.RemoveAll(filepath.Join(parent, e.Name()))
	}
}

// isReaper reports whether pid is a reaper's process.
func isReaper(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if errors.Is(err, fs.ErrPermission) {
		return true // not ours to judge: kept
	}
	arg0, _, _ := strings.Cut(string(b), "\x00")
	return err == nil && arg0 == reaperArg0
}
