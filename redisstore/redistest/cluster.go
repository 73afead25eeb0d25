package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterMasters is how many masters Cluster starts: the fewest Redis
// Cluster accepts.
const clusterMasters = 3

// Cluster starts a Redis Cluster of three masters (no replicas) on loopback
// ports, each node in a temporary directory, and returns a cluster client of
// it. Everything is stopped and removed when the test ends. It needs
// redis-server 7 or later (for cluster-port) and redis-cli on PATH.
func Cluster(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redistest: redis-cli is not on PATH: %s", installHint)
	}

	var addrs []string
	for range clusterMasters {
		// The cluster bus port is chosen explicitly (cluster-port) rather
		// than left at port+10000, which may be taken or out of range.
		bus := freePort(tb)
		srv := startServer(tb, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "5000",
		})
		addrs = append(addrs, srv.Addr())
	}

	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range addrs {
		if err := waitClusterOK(ctx, addr); err != nil {
			tb.Fatalf("redistest: cluster node %s: %v", addr, err)
		}
	}

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	tb.Cleanup(func() { rdb.Close() })
	err = rdb.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
		return shard.Ping(ctx).Err()
	})
	if err != nil {
		tb.Fatalf("redistest: cluster does not answer: %v", err)
	}
	return rdb
}

// waitClusterOK waits until the node at addr reports cluster_state:ok, that
// is, it knows a master for every slot.
func waitClusterOK(ctx context.Context, addr string) error {
	node := redis.NewClient(&redis.Options{Addr: addr})
	defer node.Close()
	var info string
	for {
		var err error
		info, err = node.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %w (last CLUSTER INFO: %q, error: %v)", ctx.Err(), info, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
