package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicated checks the answer of the WAIT sent to node after a write: n
// replicas acknowledged it. It returns ErrNotReplicated when that is
// fewer than Options.Replicas — unless Options.ReplicasConnected is set
// and node has no more replicas connected than acknowledged: then every
// replica a failover could promote has the write. That is the state of a
// slot's new master once a failover has promoted its only replica and no
// other has joined yet; waiting for a replica it does not have would
// refuse every save and click until an operator adds one.
func (s *Store) replicated(ctx context.Context, node redis.Cmdable, n int64) error {
	if n >= int64(s.replicas) {
		return nil
	}
	if s.replicasConnected {
		if c, ok := connectedReplicas(ctx, node); ok && n >= c {
			return nil
		}
	}
	return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, s.replicas, s.replicaWait)
}

// connectedReplicas is how many replicas node reports connected (INFO
// replication), and whether it said.
func connectedReplicas(ctx context.Context, node redis.Cmdable) (int64, bool) {
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// A write whose replicas did not acknowledge it (ErrNotReplicated, or an
// answer lost on the way back) is on the master, and may be on no
// replica: what reads it back, or a resend that recognises it and so
// writes nothing, would take it for durable. A WAIT after a command that
// writes nothing waits for nothing — Redis waits for the connection's
// own last write, and a resend on a new connection has none. So the
// Store marks the slot of such a write (by its hash tag), and until a
// later write there is acknowledged by the replicas, every write sent
// there with a WAIT carries a write of its own (the slot's sync key), and
// ClaimValues of a marked thread is such a write too: their WAIT then
// waits for everything the master wrote before, the unacknowledged write
// included. A failover that lost it makes the read find it gone, rather
// than a person told that their decision is recorded when the new master
// never had it.

// unsyncedFor is how long a mark is kept: past it, a replica that never
// acknowledged has been dropped by its master (repl-timeout) and resyncs
// everything when it comes back.
const unsyncedFor = 2 * time.Minute

// maxUnsynced bounds the marks kept; past it, expired ones are dropped.
const maxUnsynced = 4096

// unsynced are the slots with a write not known to be on a replica: hash
// tag to when it was marked. It is safe for concurrent use.
type unsynced struct {
	mu    sync.Mutex
	marks map[string]time.Time
}

// hashTag is the part of key that Redis Cluster hashes: between the
// first "{" and the next "}", or the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func (u *unsynced) mark(tag string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.marks == nil {
		u.marks = map[string]time.Time{}
	}
	if len(u.marks) >= maxUnsynced {
		for t, at := range u.marks {
			if now.Sub(at) > unsyncedFor {
				delete(u.marks, t)
			}
		}
	}
	u.marks[tag] = now
}

func (u *unsynced) clear(tag string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.marks, tag)
}

// has reports whether tag's slot holds a write not known to be on a
// replica.
func (u *unsynced) has(tag string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.marks[tag]
	return ok && now.Sub(at) <= unsyncedFor
}

// syncKey is the key in the slot of hash tag tag that a write to a
// marked slot sets, so that its WAIT has a write to wait for.
func (s *Store) syncKey(tag string) string {
	return s.prefix + ":{" + tag + "}:sync"
}

// syncedClaimsLua reads claims as ClaimValues does, and writes the
// slot's sync key, so that a WAIT after it waits for every write before.
//
//	KEYS: claims, sync key
//	ARGV: the claims' keys
const syncedClaimsLua = `
redis.call('SET', KEYS[2], '1', 'PX', 60000)
return redis.call('HMGET', KEYS[1], unpack(ARGV))
`

var syncedClaimsScript = redis.NewScript(syncedClaimsLua)
