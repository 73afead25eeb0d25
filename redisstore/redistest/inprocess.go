package redistest

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// The two tiers. `go test -short` (`make test-fast`) runs with no server
// outside the test process: Options and Client give the in-process Redis
// the bot itself runs when REDIS_URL is unset (the embedded Redis, held to
// the store's contract by the contract suites), and the helpers that need
// a real redis-server — StartServer, StartReplica, Cluster — skip the test
// and say that `make test` runs it. Without -short nothing is skipped, and
// every helper is a real redis-server.

// SkipHint ends a skip message: which tier runs the skipped test.
const SkipHint = "`make test` runs it (go test without -short)"

// NeedsRealRedis skips the test under -short: it needs a real
// redis-server (a crash, a restart, a replica, a cluster, a command the
// in-process Redis does not have). why says what for.
func NeedsRealRedis(tb testing.TB, why string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("needs a real redis-server (%s); %s", why, SkipHint)
	}
}

// inProcess starts the in-process Redis for a test, stopped when the test
// ends. Its clock follows the wall clock, as the bot's embedded Redis
// does, so that TTLs and leases lapse.
func inProcess(tb testing.TB) *miniredis.Miniredis {
	tb.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		tb.Fatalf("redistest: start the in-process redis: %v", err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		const step = 10 * time.Millisecond
		t := time.NewTicker(step)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	tb.Cleanup(func() {
		close(stop)
		<-done
		m.Close()
	})
	return m
}
