package bot

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// While Redis is down, go-redis's pool logs a failed dial at every
// command. The operator reads it once, then once a minute with how many
// times it came meanwhile; another line of go-redis is not hushed by it.
func TestRedisLoggerHushesRepeats(t *testing.T) {
	// Not parallel: a connection of another test hushes go-redis's log
	// (quietRedisLog) while its first ping is under way.
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	log := logrus.New()
	log.Out = io.Discard
	hook := logtest.NewLocal(log)
	l := newRedisLogger(log, clock)

	// go-redis's own format (internal/pool), as it logs a failed dial.
	const dial = "redis: connection pool: failed to dial after %d attempts: %v"
	refused := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	var wg sync.WaitGroup
	for range 4 { // commands of several goroutines
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				l.Printf(context.Background(), dial, 5, refused)
			}
		}()
	}
	wg.Wait()
	if n := len(hook.AllEntries()); n != 1 {
		t.Fatalf("200 failed dials logged %d lines, want 1", n)
	}
	if e := hook.LastEntry(); e.Level != logrus.WarnLevel || e.Data["component"] != "redis" || e.Message != "redis: connection pool: failed to dial after 5 attempts: "+refused.Error() {
		t.Errorf("the first failed dial is logged as %q at %v with %v", e.Message, e.Level, e.Data)
	}

	l.Printf(context.Background(), "redis: connection pool: failed to get a usable connection after %d attempts", 3)
	if n := len(hook.AllEntries()); n != 2 {
		t.Fatalf("another line of go-redis was hushed by the failed dials: %d lines, want 2", n)
	}

	mu.Lock()
	now = now.Add(redisLogRepeat)
	mu.Unlock()
	l.Printf(context.Background(), dial, 5, refused)
	if n := len(hook.AllEntries()); n != 3 {
		t.Fatalf("a minute on, a failed dial logged %d lines in all, want 3", n)
	}
	if e := hook.LastEntry(); e.Data["repeated"] != 199 {
		t.Errorf("the reminder says %v repeats, want 199", e.Data["repeated"])
	}
}
