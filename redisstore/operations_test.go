package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// opRecorder is a go-redis hook that records what Operation says of each
// command.
type opRecorder struct {
	mu    sync.Mutex
	ops   []string
	names []string
}

func (r *opRecorder) record(cmd redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, redisstore.Operation(cmd))
	r.names = append(r.names, cmd.Name())
}

func (r *opRecorder) take() (ops, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops, names = r.ops, r.names
	r.ops, r.names = nil, nil
	return ops, names
}

func (r *opRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *opRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.record(cmd); return next(ctx, cmd) }
}
func (r *opRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.record(c)
		}
		return next(ctx, cmds)
	}
}

// TestOperationNamesWhatACommandIsFor: the operation label the bot's
// Redis metrics use is right for each kind of store call, scripts
// included (by SHA-1 and, after NOSCRIPT, by source).
func TestOperationNamesWhatACommandIsFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	rec := &opRecorder{}
	rdb.AddHook(rec)
	s := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("ops")})
	tests := []struct {
		want string
		call func() error
	}{
		{redisstore.OpSave, func() error { return s.Save(ctx, firstCheckpoint("T1:C1:1.1", "hi")) }},
		{redisstore.OpLoad, func() error { _, err := s.Load(ctx, "T1:C1:1.1"); return err }},
		{redisstore.OpClaim, func() error { _, _, err := s.Claim(ctx, "T1:C1:1.1", "decision:c1", []byte("x")); return err }},
		{redisstore.OpLease, func() error { _, err := s.AcquireLease(ctx, "T1:C1:1.1", "p1", time.Second); return err }},
		{redisstore.OpIntake, func() error { _, err := s.Dedup(ctx, "event:Ev1", time.Minute); return err }},
		{redisstore.OpIntake, func() error {
			_, err := s.Accept(ctx, "event:Ev2", "t1", []byte(`{}`), time.Now(), time.Minute)
			return err
		}},
		{redisstore.OpSchedule, func() error { return s.Wake(ctx, "T1:C1:1.1", time.Now()) }},
		{redisstore.OpSchedule, func() error { _, err := s.WaitingTotal(ctx); return err }},
		{redisstore.OpInbox, func() error { _, err := s.InboxEntries(ctx); return err }},
	}
	for _, tt := range tests {
		rec.take()
		if err := tt.call(); err != nil {
			t.Fatal(err)
		}
		ops, names := rec.take()
		if len(ops) == 0 {
			t.Fatalf("no command recorded for a %s", tt.want)
		}
		for i, op := range ops {
			switch names[i] {
			case "multi", "exec", "hello", "client":
				// A transaction's brackets, and the handshake of a
				// new connection (go-redis keeps one pool for
				// pipelines): they name no key.
				continue
			}
			if op != tt.want {
				t.Errorf("Operation() = %q for a command of a %s (all: %v)", op, tt.want, ops)
			}
		}
	}
}
