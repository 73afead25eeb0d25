package cyclebench

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Meter counts what a client costs Redis: commands (a script is one,
// whatever it runs inside), round trips (a command, or a pipeline, is one)
// and the bytes written to and read from its
// connections. Counts are exact whatever the machine's load, so
// benchmarks can report them beside timings. It is safe for concurrent
// use.
type Meter struct {
	trips, written, read, commands atomic.Int64
}

// Counts returns the counts so far.
func (m *Meter) Counts() Counts {
	return Counts{RoundTrips: m.trips.Load(), Written: m.written.Load(), Read: m.read.Load(), Commands: m.commands.Load()}
}

// Instrument makes opts dial connections that m counts. Add m as a hook
// of the client built from opts (rdb.AddHook(m)) to count round trips.
func (m *Meter) Instrument(opts *redis.Options) {
	tlsConfig := opts.TLSConfig
	opts.TLSConfig = nil
	dial := opts.Dialer
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		var err error
		if dial != nil {
			conn, err = dial(ctx, network, addr)
		} else {
			var d net.Dialer
			conn, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		conn = meter(conn, m)
		if tlsConfig != nil {
			conn = tls.Client(conn, tlsConfig)
		}
		return conn, nil
	}
}

// DialHook implements redis.Hook.
func (m *Meter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: one command is one round trip.
func (m *Meter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		m.trips.Add(1)
		m.commands.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: one pipeline is one round
// trip.
func (m *Meter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		m.trips.Add(1)
		m.commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

type meteredConn struct {
	net.Conn
	m *Meter
}

// meteredSyscallConn is a meteredConn of a connection that offers its
// file descriptor (syscall.Conn), as a TCP connection does. go-redis
// checks a pooled connection through it before each use (a
// non-blocking peek for a closed connection or unread data), as it
// does on the bot's own connections: the wrapper that counts bytes
// must keep that, or a benchmark would spare its client a system call
// per command that the bot's pays.
type meteredSyscallConn struct {
	*meteredConn
	sc syscall.Conn
}

func (c meteredSyscallConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// meter wraps conn so that m counts its bytes, keeping syscall.Conn if
// conn has it.
func meter(conn net.Conn, m *Meter) net.Conn {
	mc := &meteredConn{Conn: conn, m: m}
	if sc, ok := conn.(syscall.Conn); ok {
		return meteredSyscallConn{mc, sc}
	}
	return mc
}

func (c *meteredConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.m.written.Add(int64(n))
	return n, err
}

func (c *meteredConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.m.read.Add(int64(n))
	return n, err
}
