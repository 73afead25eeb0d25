package cyclebench

import (
	"context"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The connections a Meter counts keep what go-redis looks for in them:
// a TCP connection's file descriptor (syscall.Conn), through which it
// checks a pooled connection before each use, as it does the bot's.
func TestMeteredConnectionsKeepSyscallConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("+OK\r\n"))
			_ = c.Close()
		}
	}()

	m := new(Meter)
	opts := &redis.Options{Addr: ln.Addr().String()}
	m.Instrument(opts)
	conn, err := opts.Dialer(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sc, ok := conn.(syscall.Conn)
	if !ok {
		t.Fatalf("a metered TCP connection (%T) is not a syscall.Conn", conn)
	}
	if _, err := sc.SyscallConn(); err != nil {
		t.Fatalf("SyscallConn: %v", err)
	}
	buf := make([]byte, 5)
	if _, err := conn.Read(buf); err != nil || string(buf) != "+OK\r\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if got := m.Counts().Read; got != 5 {
		t.Errorf("the meter counted %d bytes read, want 5", got)
	}

	// A connection without a file descriptor gets none from the meter:
	// go-redis then skips the check rather than fail it.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok := meter(a, m).(syscall.Conn); ok {
		t.Error("a metered net.Pipe claims to be a syscall.Conn")
	}
}
