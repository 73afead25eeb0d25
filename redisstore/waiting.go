package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// waitingScript is waitingLua, shared by every Store: it is a script of
// the close path alone, kept beside it rather than in New's list.
var waitingScript = redis.NewScript(waitingLua)

// waitingByKey is the key that says which acquisition of thread's lease
// last wrote its waiting count. Its hash tag is the count's own name
// (the prefix holds no braces), so on a cluster both are in one slot and
// one script reads the one and writes the other.
func (s *Store) waitingByKey(thread string) string {
	return "{" + s.prefix + ":waiting}:by:" + escape(thread)
}

// setWaitingFor records how many of thread's calls wait for a person (0:
// none) on behalf of the lease acquisition numbered seq (acquiredLua),
// unless a later acquisition has written the count since: then it writes
// nothing and reports false. It is the waiting count's half of what
// setWakeup does for the wake-up: on a cluster the count is in another
// slot than the thread and is written after the lease is released, so a
// close that arrives late — its process stalled, or the count's master
// failing over — must not put back the count of calls that a later
// holder has since settled, or clear the count of those it left waiting.
func (s *Store) setWaitingFor(ctx context.Context, thread, seq string, n int) (bool, error) {
	wrote, err := waitingScript.Run(ctx, s.rdb, []string{s.prefix + ":waiting", s.waitingByKey(thread)},
		thread, seq, max(n, 0), s.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("record waiting calls of %s: %w", thread, err)
	}
	return wrote == 1, nil
}
