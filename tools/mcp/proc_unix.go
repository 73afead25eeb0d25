//go:build unix

package mcp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/countersign/countersign/tools"
)

// DefaultServerUser is the account a stdio server runs as when the bot
// runs as root and the server's entry names no user.
const DefaultServerUser = "nobody"

// ErrServerUser is wrapped by the error of a server that cannot be run
// as the account its entry asks for.
var ErrServerUser = errors.New("cannot run the server as its user")

// serverAccount is the account a stdio server runs as: none (the bot's
// own) when the bot is not root, else cfg.User or DefaultServerUser,
// never root. It refuses a user: the bot cannot switch to.
func serverAccount(cfg tools.MCPServer) (*account, error) {
	if os.Geteuid() != 0 {
		if cfg.User != "" {
			return nil, fmt.Errorf("user %q: %w: the bot does not run as root", cfg.User, ErrServerUser)
		}
		return nil, nil
	}
	name := cfg.User
	if name == "" {
		name = DefaultServerUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		var byID error
		if u, byID = user.LookupId(name); byID != nil {
			return nil, fmt.Errorf("user %q: %w: %v", name, ErrServerUser, err)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %q: %w: its ids %s:%s are not numbers", name, ErrServerUser, u.Uid, u.Gid)
	}
	if uid == 0 {
		return nil, fmt.Errorf("user %q: %w: it is root", name, ErrServerUser)
	}
	a := &account{name: u.Username, uid: uint32(uid), gid: uint32(gid)}
	if a.home, err = serverHome(a); err != nil {
		return nil, fmt.Errorf("user %q: %w: its home: %v", name, ErrServerUser, err)
	}
	return a, nil
}

// runAs makes cmd run as a, with no supplementary groups, in its home.
func runAs(cmd *exec.Cmd, a *account) {
	if a == nil {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: []uint32{}}}
	cmd.Dir = a.home
}

// serverHome makes the home of the servers that run as a:
// $TMPDIR/countersign-mcp/<user>, owned by a and closed to others, kept
// across restarts so that caches such as npx's last. Its parent belongs
// to root and is writable by root only, so that no other user can plant
// a home or a link there.
func serverHome(a *account) (string, error) {
	base := filepath.Join(os.TempDir(), "countersign-mcp")
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := checkDir(base, 0); err != nil {
		return "", err
	}
	if err := os.Chmod(base, 0o755); err != nil {
		return "", err
	}
	home := filepath.Join(base, a.name)
	if err := os.Mkdir(home, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	// Only root writes in base: what is there is ours or the user's.
	fi, err := os.Lstat(home)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", home)
	}
	if err := os.Lchown(home, int(a.uid), int(a.gid)); err != nil {
		return "", err
	}
	return home, os.Chmod(home, 0o700)
}

// workParent is where a server's working directory is made (see
// workdir_linux.go): the home of the account it runs as, else
// $TMPDIR/countersign-mcp-<uid>, the bot's own and closed to others;
// not the bot's working directory, which a server's files have no
// business in.
func workParent(a *account) (string, error) {
	if a != nil {
		return a.home, nil
	}
	uid := os.Geteuid()
	dir := filepath.Join(os.TempDir(), "countersign-mcp-"+strconv.Itoa(uid))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	// Another user of the machine may have made it first, or put a
	// link there.
	if err := checkDir(dir, uint32(uid)); err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o700)
}

// checkDir fails unless dir is a directory, not a link, owned by uid.
func checkDir(dir string, uid uint32) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != uid {
		return fmt.Errorf("%s is not a directory of uid %d", dir, uid)
	}
	return nil
}
