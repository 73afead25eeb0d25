// Package redistest gives tests a Redis: the server named by REDIS_URL, or
// throwaway redis-server processes on loopback ports, including a small
// Redis Cluster. Under -short (the fast tier, `make test-fast`) Options and
// Client give the bot's own in-process Redis instead, and the helpers that
// need a real server skip the test, naming the tier that runs it (see
// inprocess.go). Without -short it never fakes Redis and never skips: a
// test that asks for Redis on a machine without redis-server fails and says
// how to install it.
//
// Tests of several packages may share one server through REDIS_URL at the
// same time, so they must use keys (thread names) of their own and never
// flush the database.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// installHint says how to get the binaries the helpers run.
const installHint = "install Redis (Debian/Ubuntu: apt-get install redis-server, which brings redis-cli; macOS: brew install redis) or set REDIS_URL"

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 20 * time.Second

// RefusedAddr returns a loopback address where connections are refused,
// as they are where no Redis runs, for the rest of the test: a socket
// bound to it without listening keeps other tests, which the system gives
// free ports, from being given it (a port closed after listening would
// be free for any of them).
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	port, fd, err := refusingPort()
	if err != nil {
		tb.Fatalf("redistest: a port that refuses connections: %v", err)
	}
	tb.Cleanup(func() { releasePort(fd) })
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// Options returns client options for the test Redis: REDIS_URL when it is
// set, otherwise under -short the in-process Redis, otherwise a throwaway
// redis-server started for the test. Use it to
// build a client with settings of your own (a counting dialer, a pool size);
// Client is the shortcut for the common case.
func Options(tb testing.TB) *redis.Options {
	tb.Helper()
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			tb.Fatalf("redistest: REDIS_URL: %v", err)
		}
		return opts
	}
	if testing.Short() {
		return &redis.Options{Addr: inProcess(tb).Addr()}
	}
	srv := startServer(tb, nil)
	return &redis.Options{Addr: srv.Addr()}
}

// Client returns a client of the test Redis (see Options), closed when the
// test ends.
func Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	opts := Options(tb)
	rdb := redis.NewClient(opts)
	tb.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("redistest: redis at %s does not answer: %v", opts.Addr, err)
	}
	return rdb
}

// Server is a redis-server process that a test started, for tests that crash
// and restart Redis. It runs with an append-only file synced on every write,
// so a Kill loses nothing Redis acknowledged and Restart brings it back.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	args []string

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	// held is the socket that keeps the port while a killed server is
	// down (holdPort); -1 when none does.
	held int
}

// StartServer starts a redis-server on a free loopback port, killed when the
// test ends. Under -short it skips the test (see NeedsRealRedis).
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	NeedsRealRedis(tb, "a redis-server process of its own")
	return startServer(tb, []string{"--appendonly", "yes", "--appendfsync", "always"})
}

// startServer starts redis-server with extra configuration arguments. A
// server started without "--appendonly yes" keeps nothing on disk.
func startServer(tb testing.TB, args []string) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server is not on PATH: %s", installHint)
	}
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir(), args: args, held: -1}
	tb.Cleanup(s.stop)

	// Another process may take the free port before redis-server binds
	// it; try a few.
	for attempt := 1; ; attempt++ {
		s.port = freePort(tb)
		err := s.start()
		if err == nil {
			return s
		}
		if attempt == 3 {
			tb.Fatalf("redistest: start redis-server: %v", err)
		}
	}
}

// Addr returns the server's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it to
// exit.
func (s *Server) Kill() {
	s.tb.Helper()
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.tb.Fatalf("redistest: kill redis-server: %v", err)
	}
	<-s.exited
	s.cmd = nil
	s.held = holdPort(s.port)
}

// Restart starts the server again on the same port with the same data
// directory, killing it first if it still runs.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		s.tb.Fatalf("redistest: restart redis-server: %v", err)
	}
}

func (s *Server) stop() {
	releasePort(s.held)
	s.held = -1
	if s.cmd != nil {
		s.cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
	}
}

// start runs redis-server and waits until it answers PING.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "redis.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()

	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		// A replica's first copy is sent at once, not after the five
		// seconds a master waits for more replicas to share it.
		"--repl-diskless-sync-delay", "0",
	}
	args = append(args, s.args...) // later arguments win
	releasePort(s.held)
	s.held = -1
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, tail(logPath))
		default:
		}
		if ping(s.Addr()) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", s.port, startTimeout, tail(logPath))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends PING over a fresh connection and expects PONG (not, say,
// LOADING while an append-only file is replayed).
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	ports := freePorts(tb, 1)
	return ports[0]
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago, and that no server of this process was given before.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("redistest: find a free port: %v", err)
		}
		defer l.Close() // held until all are chosen, so they differ
		port := l.Addr().(*net.TCPAddr).Port
		if _, taken := given.LoadOrStore(port, true); !taken {
			ports = append(ports, port)
		}
	}
	return ports
}

// given holds every port freePorts gave in this process, for good. A
// server killed is started again on its port (Restart, a cluster node
// that rejoins); between the two, the port is free, and the system
// would give it to the next test that asks for one, whose server would
// then take it from the restart ("Address already in use").
var given sync.Map // port → true

// tail returns the end of a log file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return strings.TrimSpace(string(b))
}

// StartReplica starts a redis-server that replicates master, and waits
// until the replication link is up.
func StartReplica(tb testing.TB, master *Server) *Server {
	tb.Helper()
	NeedsRealRedis(tb, "a replica")
	s := startServer(tb, []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.port)})
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rdb.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := rdb.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: the replica's link to its master is not up: %v %s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pause stops the server (SIGSTOP) until Resume: it keeps its connections
// and answers nothing, as a stalled machine would.
func (s *Server) Pause() {
	s.tb.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.tb.Fatalf("redistest: pause redis-server: %v", err)
	}
}

// Resume lets a paused server go on.
func (s *Server) Resume() {
	s.tb.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.tb.Fatalf("redistest: resume redis-server: %v", err)
	}
}
