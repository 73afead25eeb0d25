package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

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
