package bot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
)

// The no-configuration Redis that keeps data. With REDIS_URL unset and
// redis-server on PATH, the bot starts redis-server as a child process
// with its append-only file in the user's state directory (StateDir), on
// a loopback port, with a password new at every start: threads survive a
// restart with nothing configured. The directory holds:
//
//	appendonlydir/  Redis's data (delete the directory to start afresh)
//	server          the running server's address
//	lock            held while a bot's server runs
//	redis.log       the server's log
//
// The password is in no file: it lives in the bot's memory and reaches
// the server on its stdin. A file the bot's user can read, a stdio MCP
// server started as that user could read too, and with it approve its
// own calls (docs/tools.md, "What a tool process can and cannot see").
//
// One server runs per directory: the lock is held by the bot that
// started it and by the server itself (it inherits the locked file), so
// a server still writing its file after its bot died keeps a new one
// from starting on the same data. A second bot started while one runs
// (an operator command beside `bot serve`) is told so: it cannot know
// the running server's password, by design.
//
// The child stops with the bot: the bot stops it on exit, and on Linux
// the kernel ends it (SIGTERM, so it writes its file) if the bot dies.

// localRedisStart bounds how long the server may take to start and load
// its data, and a dying server to let go of the directory.
const localRedisStart = 30 * time.Second

// StateDir is the directory of the bot's local state:
// $XDG_STATE_HOME/countersign, or ~/.local/state/countersign; "" when
// neither XDG_STATE_HOME nor HOME is set.
func StateDir(getenv func(string) string) string {
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "countersign")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "countersign")
	}
	return ""
}

// LocalRedisDir is the state directory the no-configuration default
// keeps its Redis data in, or "" when it keeps nothing (REDIS_URL is
// set, there is no redis-server on PATH, no state directory, or the
// platform cannot lock one).
func LocalRedisDir(getenv func(string) string) string {
	if getenv("REDIS_URL") != "" || !canLock {
		return ""
	}
	dir := StateDir(getenv)
	if dir == "" {
		return ""
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return ""
	}
	return dir
}

// localRedis is the redis-server this process started on the state
// directory.
type localRedis struct {
	dir, addr, password string
	lock                *os.File
	cmd                 *exec.Cmd
	exited              chan struct{}
}

// startLocalRedis starts a redis-server on dir, or finds the one another
// bot runs there.
func startLocalRedis(ctx context.Context, dir string) (*localRedis, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	deadline := time.Now().Add(localRedisStart)
	for {
		ok, err := tryLock(lock)
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("lock %s: %w", lock.Name(), err)
		}
		if ok {
			break
		}
		// Another bot's server: say so if it answers; otherwise it is
		// starting or stopping, so wait for the lock.
		if addr, ok := runningLocalRedis(dir); ok {
			lock.Close()
			return nil, fmt.Errorf("%w: a running bot keeps its threads in %s (its redis-server is at %s). Stop that bot first; "+
				"or, to run both, set REDIS_URL for both to one Redis, or XDG_STATE_HOME for this one to another directory "+
				"(whose threads are its own)", ErrLocalRedisInUse, dir, addr)
		}
		if time.Now().After(deadline) {
			lock.Close()
			return nil, fmt.Errorf("the redis-server of %s is locked by another process and does not answer; stop it, or delete the directory to start afresh", dir)
		}
		select {
		case <-ctx.Done():
			lock.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	l := &localRedis{dir: dir, lock: lock}
	if err := l.start(ctx, deadline); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// ErrLocalRedisInUse: the state directory's redis-server runs for
// another bot.
var ErrLocalRedisInUse = errors.New("the local Redis is in use")

// runningLocalRedis reports whether the server another bot runs on dir
// answers, and its address.
func runningLocalRedis(dir string) (string, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, "server"))
	if err != nil {
		return "", false
	}
	addr := strings.TrimSpace(string(raw))
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", false
	}
	conn.Close()
	return addr, true
}

// redisServerEnv is the environment of the local redis-server: of
// environ, the time zone (TZ, for its log's times) alone. It needs
// nothing else, and the bot's own (SLACK_BOT_TOKEN, the model's key,
// MCP_TOKEN_KEY …) are no business of a child process.
func redisServerEnv(environ []string) []string {
	env := []string{}
	for _, kv := range environ {
		if strings.HasPrefix(kv, "TZ=") {
			env = append(env, kv)
		}
	}
	return env
}

func (l *localRedis) options() *redis.Options {
	return &redis.Options{Addr: l.addr, Password: l.password}
}

// start runs redis-server, holding the lock, and waits until it has
// loaded its data.
func (l *localRedis) start(ctx context.Context, deadline time.Time) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	l.password = embeddedRedisPassword()
	_ = os.Remove(filepath.Join(l.dir, "password")) // kept by a version that shared the server
	_ = os.Remove(filepath.Join(l.dir, "server"))
	port, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	l.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// The configuration, password included, goes on stdin: a command
	// line is readable by every process on the host.
	conf := strings.Join([]string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"protected-mode yes",
		"daemonize no",
		"dir " + redisQuote(l.dir),
		"logfile " + redisQuote(filepath.Join(l.dir, "redis.log")),
		"appendonly yes",
		"appendfsync everysec",
		`save ""`,
		"requirepass " + redisQuote(l.password),
	}, "\n") + "\n"
	cmd := exec.Command(bin, "-")
	cmd.Dir = l.dir
	cmd.Stdin = strings.NewReader(conf)
	cmd.ExtraFiles = []*os.File{l.lock} // the server holds the lock too
	cmd.Env = redisServerEnv(os.Environ())
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	l.cmd, l.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(l.exited) }()

	rdb := redis.NewClient(l.options())
	defer rdb.Close()
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			break
		}
		select {
		case <-l.exited:
			return fmt.Errorf("redis-server exited at start-up; its log is %s: %s", filepath.Join(l.dir, "redis.log"),
				lastLine(filepath.Join(l.dir, "redis.log")))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server in %s did not answer within %v: %w", l.dir, localRedisStart, err)
		}
	}
	return writePrivate(filepath.Join(l.dir, "server"), l.addr)
}

// close stops the server if this process started it (SIGTERM: it
// writes its file and exits) and lets go of the directory.
func (l *localRedis) close() {
	if l.cmd != nil {
		_ = l.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-l.exited:
		case <-time.After(10 * time.Second):
			_ = l.cmd.Process.Kill()
			<-l.exited
		}
		_ = os.Remove(filepath.Join(l.dir, "server"))
		l.cmd = nil
	}
	if l.lock != nil {
		_ = l.lock.Close()
		l.lock = nil
	}
}

// writePrivate writes a file only its owner reads, replacing it whole.
func writePrivate(path, content string) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// freeLoopbackPort is a loopback TCP port that was free a moment ago.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// redisQuote quotes s for a redis.conf line.
func redisQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`)
	return `"` + r.Replace(s) + `"`
}

// lastLine is the last line of a log file, for an error message.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// logLocalRedis says at start-up where the threads are kept and how to
// start afresh.
func logLocalRedis(log logrus.FieldLogger, l *localRedis) {
	log.WithFields(logrus.Fields{"dir": l.dir, "addr": l.addr}).Info("REDIS_URL is not set: threads are kept in a local redis-server (started for this bot)" +
		" with its data in " + l.dir + ", so they survive a restart. To start afresh, stop the bot and delete that directory; " +
		"to use another Redis, set REDIS_URL.")
}
