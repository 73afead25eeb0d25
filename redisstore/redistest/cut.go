package redistest

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cutter makes a client's link lose the answer of one command after Redis
// has run it, the way a flaky network does: go-redis then sends the
// command again on a new connection. Arm it, and the next command whose
// bytes hold its marker has its answer cut (an error answer, such as
// NOSCRIPT, is let through and the Cutter stays armed).
type Cutter struct {
	marker []byte
	armed  atomic.Bool
	cuts   atomic.Int64
}

// CutClient returns a client of the test Redis (see Options) whose link a
// Cutter for marker controls.
func CutClient(tb testing.TB, marker string) (*redis.Client, *Cutter) {
	tb.Helper()
	opts := Options(tb)
	opts.MinRetryBackoff, opts.MaxRetryBackoff = time.Millisecond, 2*time.Millisecond
	rdb := redis.NewClient(opts)
	tb.Cleanup(func() { rdb.Close() })
	c := &Cutter{marker: []byte(marker)}
	rdb.AddHook(c)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("redistest: redis at %s does not answer: %v", opts.Addr, err)
	}
	return rdb, c
}

// Arm cuts the answer of the next command that names the marker.
func (c *Cutter) Arm() { c.armed.Store(true) }

// Cuts counts the answers cut so far.
func (c *Cutter) Cuts() int { return int(c.cuts.Load()) }

// DialHook implements redis.Hook.
func (c *Cutter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: conn, c: c}, nil
	}
}

// ProcessHook implements redis.Hook.
func (c *Cutter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (c *Cutter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type cutConn struct {
	net.Conn
	c       *Cutter
	mu      sync.Mutex
	cutNext bool
}

func (cc *cutConn) Write(p []byte) (int, error) {
	if cc.c.armed.Load() && bytes.Contains(p, cc.c.marker) {
		cc.mu.Lock()
		cc.cutNext = true
		cc.mu.Unlock()
	}
	return cc.Conn.Write(p)
}

func (cc *cutConn) Read(p []byte) (int, error) {
	cc.mu.Lock()
	cut := cc.cutNext
	cc.mu.Unlock()
	if !cut {
		return cc.Conn.Read(p)
	}
	// Read the answer, so that Redis has run the command, and lose it.
	n, err := cc.Conn.Read(p)
	if err != nil || (n > 0 && p[0] == '-') || !cc.c.armed.CompareAndSwap(true, false) {
		return n, err
	}
	cc.c.cuts.Add(1)
	cc.Conn.Close()
	return 0, io.EOF
}
