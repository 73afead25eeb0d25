package redisstore_test

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

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// replyCutter is a go-redis hook whose connections lose the answer of the
// next command that names marker, after Redis has run it: the link drops
// the way a flaky network does, and go-redis sends the command again on
// a new connection.
type replyCutter struct {
	marker []byte
	armed  atomic.Bool
	cuts   atomic.Int64
}

func (c *replyCutter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: conn, c: c}, nil
	}
}

func (c *replyCutter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (c *replyCutter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type cutConn struct {
	net.Conn
	c       *replyCutter
	mu      sync.Mutex
	cutNext bool
}

func (cc *cutConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, cc.c.marker) && cc.c.armed.Load() {
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
	if err != nil {
		return n, err
	}
	if n > 0 && p[0] == '-' { // an error such as NOSCRIPT: let it through
		return n, nil
	}
	if !cc.c.armed.CompareAndSwap(true, false) {
		return n, nil
	}
	cc.c.cuts.Add(1)
	cc.Conn.Close()
	return 0, io.EOF
}

// cutClient is a client of the test Redis whose link cuts the answer of
// the first command naming marker once armed.
func cutClient(t *testing.T, marker string) (*redis.Client, *replyCutter) {
	opts := redistest.Options(t)
	opts.MinRetryBackoff, opts.MaxRetryBackoff = time.Millisecond, 2*time.Millisecond
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	cutter := &replyCutter{marker: []byte(marker)}
	rdb.AddHook(cutter)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb, cutter
}

// TestFirstOrRepeatSurvivesACutAnswer: the writes whose answer says
// "first" or "repeat" — Dedup of a click or an event, Accept of a
// request — are retried by go-redis when their answer is lost. The
// retry finds what its own first attempt wrote, and must still say
// "first": taken for a repeated delivery, the click is dropped with a 200
// to Slack and no answer to the person.
func TestFirstOrRepeatSurvivesACutAnswer(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		write func(s *redisstore.Store) (bool, error)
	}{
		{"dedup", func(s *redisstore.Store) (bool, error) {
			return s.Dedup(ctx, "action:U0BOB:1700000000.1:approve", time.Minute)
		}},
		{"accept", func(s *redisstore.Store) (bool, error) {
			return s.Accept(ctx, "event:Ev0CUT", []byte(`{"kind":"reply"}`), time.Now().Add(15*time.Second), time.Minute)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb, cutter := cutClient(t, "CUTME")
			s := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("cut-" + tt.name + "-CUTME")})
			cutter.armed.Store(true)
			first, err := tt.write(s)
			if cutter.cuts.Load() != 1 {
				t.Fatalf("%d answers were cut, want 1: the test does not test anything", cutter.cuts.Load())
			}
			if err != nil || !first {
				t.Fatalf("%s with its answer cut once = %v, %v; want true: the retry took its own write for a repeat", tt.name, first, err)
			}
			if again, err := tt.write(s); err != nil || again {
				t.Errorf("%s of a real repeat = %v, %v; want false", tt.name, again, err)
			}
		})
	}
}
