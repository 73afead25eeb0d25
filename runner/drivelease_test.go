package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// lapsingClaims is the store whose claim read, once armed, finds the
// thread's lease ended (end), as a stall past it would, and waits for the
// run to be stopped for that.
type lapsingClaims struct {
	*redisstore.Store
	armed *atomic.Bool
	end   func()
}

func (l lapsingClaims) ClaimValues(ctx context.Context, thread string, keys []string) (map[string][]byte, error) {
	if l.armed.CompareAndSwap(true, false) {
		l.end()
		<-ctx.Done()
	}
	return l.Store.ClaimValues(ctx, thread, keys)
}

// TestDriveThatLostItsLeaseSaysSo: a drive loses the thread's lease while
// it reads the claims, and is stopped. It says the lease was lost, not
// "context canceled"; nothing of the thread changed, and the next drive
// finds the calls still waiting.
func TestDriveThatLostItsLeaseSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := policyWorld(t)
	svc, _ := w.service(t, nil, 1500*time.Millisecond)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")

	var armed atomic.Bool
	armed.Store(true)
	w.leases = func(s *redisstore.Store) runner.Store {
		return lapsingClaims{s, &armed, func() {
			if n, err := w.rdb.Del(context.Background(), leaseKey(w, "th")).Result(); err != nil || n != 1 {
				t.Errorf("ending the lease of the drive: %d keys, %v; want it held", n, err)
			}
		}}
	}
	other, _ := w.service(t, nil, 1500*time.Millisecond) // no cached state: it reads the claims
	if err := other.Drive(ctx, "th"); !errors.Is(err, runner.ErrLeaseLost) {
		t.Fatalf("Drive() that lost its lease = %v, want ErrLeaseLost", err)
	}
	if armed.Load() {
		t.Fatal("the drive did not read the claims: the test does not test anything")
	}
	if err := other.Drive(ctx, "th"); err != nil {
		t.Fatalf("Drive() again = %v", err)
	}
	if c := waitingCall(t, other, "th", "deploy"); c.Key != deploy.Key {
		t.Errorf("after the drive that lost its lease, %s waits; want %s still", c.Key, deploy.Key)
	}
	if n := tg.Count("POST /deploy"); n != 0 {
		t.Errorf("deploy ran %d times, want never: nobody approved it", n)
	}
}
