package redistest

import (
	"context"
	"fmt"
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
// redis-server 7 or later (for cluster-port and CLUSTER ADDSLOTSRANGE) on PATH.
func Cluster(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	return startCluster(tb, 0).Client
}

// ReplicatedCluster is a Redis Cluster of three masters with one replica
// each, for tests that fail a master over.
type ReplicatedCluster struct {
	// Client is a cluster client of it.
	Client *redis.ClusterClient
	nodes  []*Server
}

// ClusterWithReplicas starts a Redis Cluster of three masters, each with
// one replica, as Cluster does.
func ClusterWithReplicas(tb testing.TB) *ReplicatedCluster {
	tb.Helper()
	return startCluster(tb, 1)
}

func startCluster(tb testing.TB, replicas int) *ReplicatedCluster {
	tb.Helper()
	NeedsRealRedis(tb, "a Redis Cluster")

	var addrs []string
	var buses []int
	var nodes []*Server
	for range clusterMasters * (1 + replicas) {
		// The cluster bus port is chosen explicitly (cluster-port) rather
		// than left at port+10000, which may be taken or out of range.
		bus := freePort(tb)
		srv := startServer(tb, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.Itoa(int(nodeTimeout / time.Millisecond)),
			// A replica whose master is found dead takes over however
			// long ago it last heard from it: on a busy machine that can
			// be longer than the default allows, and the tests kill a
			// master only once its replica has caught up.
			"--cluster-replica-validity-factor", "0",
		})
		addrs = append(addrs, srv.Addr())
		buses = append(buses, bus)
		nodes = append(nodes, srv)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := createCluster(ctx, addrs, buses); err != nil {
		tb.Fatalf("redistest: create the cluster: %v", err)
	}
	for _, addr := range addrs {
		if err := waitClusterOK(ctx, addr); err != nil {
			tb.Fatalf("redistest: cluster node %s: %v", addr, err)
		}
	}
	if replicas > 0 {
		if err := waitReplicasUp(ctx, addrs, clusterMasters*replicas); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		// A replica's link comes up before every node has heard, by
		// gossip, whose replica it is: wait for that too, so that
		// masterAndReplica reads it from any node.
		for _, addr := range addrs {
			if err := waitReplicasKnown(ctx, addr, clusterMasters*replicas); err != nil {
				tb.Fatalf("redistest: cluster node %s: %v", addr, err)
			}
		}
	}

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	tb.Cleanup(func() { rdb.Close() })
	err := rdb.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
		return shard.Ping(ctx).Err()
	})
	if err != nil {
		tb.Fatalf("redistest: cluster does not answer: %v", err)
	}
	return &ReplicatedCluster{Client: rdb, nodes: nodes}
}

// nodeTimeout is the cluster's cluster-node-timeout: how long a node
// goes unanswered before the others count it failing, and its replica
// is elected in its place. Redis's default is 15 s; a test that kills
// a master waits about this long, and a little more, for the election.
// A node of a busy machine's test answers well within it.
const nodeTimeout = 2 * time.Second

// createCluster makes the nodes at addrs (their cluster bus ports at
// buses) one cluster, as redis-cli --cluster create does without its
// pauses of a second: the first clusterMasters nodes share the slots
// as it shares them, and each of the others is the replica of one of
// them in turn. It returns once every node knows every
// other and the replicas have been told their masters; the caller
// waits for the cluster to be ok.
func createCluster(ctx context.Context, addrs []string, buses []int) error {
	clients := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr})
		defer clients[i].Close()
	}
	ids := make([]string, len(addrs))
	for i, c := range clients {
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", addrs[i], err)
		}
		ids[i] = id
		// Each node its own epoch, as redis-cli gives them, so that the
		// masters' claims to their slots never collide.
		if err := c.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", addrs[i], err)
		}
	}
	// The slots are shared as redis-cli shares them: 0-5460, 5461-10922,
	// 10923-16383.
	bound := func(i int) int { return (2*i*16384 + clusterMasters) / (2 * clusterMasters) }
	for i := range clusterMasters {
		lo, hi := bound(i), bound(i+1)-1
		if err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, addrs[i], err)
		}
	}
	for i := 1; i < len(addrs); i++ {
		host, port, _ := strings.Cut(addrs[i], ":")
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", host, port, buses[i]).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", addrs[i], err)
		}
	}
	for i := range addrs {
		if err := waitNodesKnown(ctx, addrs[i], len(addrs)); err != nil {
			return fmt.Errorf("cluster node %s: %w", addrs[i], err)
		}
	}
	for i := clusterMasters; i < len(addrs); i++ {
		master := ids[(i-clusterMasters)%clusterMasters]
		if err := clients[i].Do(ctx, "CLUSTER", "REPLICATE", master).Err(); err != nil {
			return fmt.Errorf("CLUSTER REPLICATE on %s: %w", addrs[i], err)
		}
	}
	return nil
}

// waitNodesKnown waits until the node at addr knows n nodes (itself
// among them), each past the handshake.
func waitNodesKnown(ctx context.Context, addr string, n int) error {
	node := redis.NewClient(&redis.Options{Addr: addr})
	defer node.Close()
	var out string
	for {
		var err error
		out, err = node.ClusterNodes(ctx).Result()
		known := 0
		if err == nil {
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if f := strings.Fields(line); len(f) >= 8 && !strings.Contains(f[2], "handshake") && !strings.Contains(f[2], "noaddr") {
					known++
				}
			}
		}
		if known >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d nodes known: %w (last CLUSTER NODES: %q, error: %v)", known, n, ctx.Err(), out, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReplicasUp waits until n replicas among the nodes at addrs report
// their link to their master up.
func waitReplicasUp(ctx context.Context, addrs []string, n int) error {
	for {
		up := 0
		for _, addr := range addrs {
			node := redis.NewClient(&redis.Options{Addr: addr})
			info, err := node.Info(ctx, "replication").Result()
			node.Close()
			if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
				up++
			}
		}
		if up >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d cluster replicas linked to their masters: %w", up, n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitReplicasKnown waits until the node at addr lists n replicas, each
// with its master, in CLUSTER NODES.
func waitReplicasKnown(ctx context.Context, addr string, n int) error {
	node := redis.NewClient(&redis.Options{Addr: addr})
	defer node.Close()
	var out string
	for {
		known := 0
		var err error
		out, err = node.ClusterNodes(ctx).Result()
		if err == nil {
			for _, c := range parseClusterNodes(out) {
				if !c.isMaster && c.master != "-" {
					known++
				}
			}
		}
		if known >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d replicas known: %w (last CLUSTER NODES: %q, error: %v)", known, n, ctx.Err(), out, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string
	isMaster         bool
	slots            [][2]int
}

// parseClusterNodes reads the answer of CLUSTER NODES.
func parseClusterNodes(out string) []clusterNode {
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := clusterNode{id: f[0], addr: strings.Split(f[1], "@")[0], master: f[3],
			isMaster: strings.Contains(f[2], "master") && !strings.Contains(f[2], "fail")}
		for _, r := range f[8:] {
			lo, hi, _ := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			if hi == "" {
				hi = lo
			}
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil {
				n.slots = append(n.slots, [2]int{a, b})
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// Failover makes the replica of the master that owns key's slot the
// slot's master, as an operator's CLUSTER FAILOVER does, and waits until
// every node agrees. It returns the address of the slot's new master.
func (c *ReplicatedCluster) Failover(tb testing.TB, key string) string {
	tb.Helper()
	return c.StartFailover(tb, key, false)()
}

// StartFailover begins to fail the master of key's slot over to its
// replica and returns as soon as it has: by CLUSTER FAILOVER on the
// replica, or, with kill, by killing (SIGKILL) the master once the
// replica has caught up with it — the killed node stays down. It is for
// tests that fail a master over while the code under test works: done
// waits until every node left maps the slot to its new master (and, after
// a kill, reports the cluster ok), and returns that master's address.
// Call done from the test's goroutine.
func (c *ReplicatedCluster) StartFailover(tb testing.TB, key string, kill bool) (done func() string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	tb.Cleanup(cancel)
	slot := int(c.Client.ClusterKeySlot(ctx, key).Val())
	master, replica := c.masterAndReplica(ctx, tb, slot)
	alive := c.nodes
	if kill {
		if err := waitCaughtUp(ctx, master, replica); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		alive = nil
		for _, s := range c.nodes {
			if s.Addr() == master {
				s.Kill()
			} else {
				alive = append(alive, s)
			}
		}
		c.nodes = alive
	} else {
		r := redis.NewClient(&redis.Options{Addr: replica})
		err := r.Do(ctx, "CLUSTER", "FAILOVER").Err()
		r.Close()
		if err != nil {
			tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica, err)
		}
	}
	return func() string {
		tb.Helper()
		defer cancel()
		for _, s := range alive {
			if err := waitOwner(ctx, s.Addr(), slot, replica); err != nil {
				tb.Fatalf("redistest: %v", err)
			}
			if !kill {
				continue
			}
			if err := waitClusterOK(ctx, s.Addr()); err != nil {
				tb.Fatalf("redistest: cluster node %s: %v", s.Addr(), err)
			}
		}
		return replica
	}
}

// masterAndReplica returns the addresses of the master that owns slot
// and of its replica.
func (c *ReplicatedCluster) masterAndReplica(ctx context.Context, tb testing.TB, slot int) (master, replica string) {
	tb.Helper()
	node := redis.NewClient(&redis.Options{Addr: c.nodes[0].Addr()})
	out, err := node.ClusterNodes(ctx).Result()
	node.Close()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER NODES: %v", err)
	}
	nodes := parseClusterNodes(out)
	master = ownerOf(nodes, slot)
	var masterID string
	for _, n := range nodes {
		if n.addr == master {
			masterID = n.id
		}
	}
	for _, n := range nodes {
		if masterID != "" && n.master == masterID {
			replica = n.addr
		}
	}
	if replica == "" {
		tb.Fatalf("redistest: no replica of the master of slot %d in:\n%s", slot, out)
	}
	return master, replica
}

// waitOwner waits until the node at addr maps slot to the master at
// owner.
func waitOwner(ctx context.Context, addr string, slot int, owner string) error {
	n := redis.NewClient(&redis.Options{Addr: addr})
	defer n.Close()
	for {
		out, err := n.ClusterNodes(ctx).Result()
		if err == nil && ownerOf(parseClusterNodes(out), slot) == owner {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s never saw %s take slot %d over: %v", addr, owner, slot, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ownerOf returns the address of the master that owns slot.
func ownerOf(nodes []clusterNode, slot int) string {
	for _, n := range nodes {
		for _, r := range n.slots {
			if n.isMaster && slot >= r[0] && slot <= r[1] {
				return n.addr
			}
		}
	}
	return ""
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

// KillMaster kills (SIGKILL) the master that owns key's slot, once its
// replica has caught up with it, and waits until that replica has taken
// the slot over and every node left reports the cluster ok. It returns
// the address of the slot's new master. The killed node stays down.
func (c *ReplicatedCluster) KillMaster(tb testing.TB, key string) string {
	tb.Helper()
	return c.StartFailover(tb, key, true)()
}

// Addrs returns the addresses of the nodes still up, for a client of
// the cluster's own (a cluster URL's seeds).
func (c *ReplicatedCluster) Addrs() []string {
	addrs := make([]string, 0, len(c.nodes))
	for _, s := range c.nodes {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// waitCaughtUp waits until the replica at replica has processed the
// replication stream of the master at master as far as it goes now.
func waitCaughtUp(ctx context.Context, master, replica string) error {
	offset := func(addr, field string) int64 {
		n := redis.NewClient(&redis.Options{Addr: addr})
		defer n.Close()
		info, err := n.Info(ctx, "replication").Result()
		if err != nil {
			return -1
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
				o, _ := strconv.ParseInt(v, 10, 64)
				return o
			}
		}
		return -1
	}
	want := offset(master, "master_repl_offset")
	for {
		if want >= 0 && offset(replica, "slave_repl_offset") >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica %s never caught up with %s (offset %d): %w", replica, master, want, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Lag is a replica held behind its master by LagReplica.
type Lag struct {
	tb           testing.TB
	c            *ReplicatedCluster
	ctx          context.Context
	cancel       context.CancelFunc
	slot         int
	master, addr string
	replica      *Server
	done         bool
	// killed is the master TakeOver killed, for Rejoin.
	killed *Server
}

// LagReplica stops (SIGSTOP) the replica of the master that owns key's
// slot and fills the link to it, so that from now on what that master
// acknowledges stays in the master's memory and reaches no replica — a
// replica cut off or far behind, as under a network partition, while
// the master still counts it connected. Then TakeOver fails the master
// over to it, losing those writes, or CatchUp lets it go on.
func (c *ReplicatedCluster) LagReplica(tb testing.TB, key string) *Lag {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	tb.Cleanup(cancel)
	slot := int(c.Client.ClusterKeySlot(ctx, key).Val())
	master, replica := c.masterAndReplica(ctx, tb, slot)
	if err := waitCaughtUp(ctx, master, replica); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	l := &Lag{tb: tb, c: c, ctx: ctx, cancel: cancel, slot: slot, master: master, addr: replica, replica: c.node(tb, replica)}
	l.replica.Pause()
	tb.Cleanup(func() {
		if !l.done {
			l.replica.Resume()
		}
	})
	if err := fillReplicaLink(ctx, master, key); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return l
}

// TakeOver kills (SIGKILL) the lagging replica's master, lets the
// replica go on and makes it the slot's master by CLUSTER FAILOVER
// TAKEOVER, as the cluster's own election does once the master is found
// dead: every write the master acknowledged since LagReplica is lost. It
// waits until every node left maps the slot to the new master and
// reports the cluster ok, and returns its address. Call it from the
// test's goroutine.
func (l *Lag) TakeOver() string {
	l.tb.Helper()
	defer l.cancel()
	l.done = true
	var alive []*Server
	for _, s := range l.c.nodes {
		if s.Addr() == l.master {
			s.Kill()
			l.killed = s
		} else {
			alive = append(alive, s)
		}
	}
	l.c.nodes = alive
	l.replica.Resume()
	r := redis.NewClient(&redis.Options{Addr: l.addr})
	err := r.Do(l.ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err()
	r.Close()
	if err != nil {
		l.tb.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on %s: %v", l.addr, err)
	}
	for _, s := range alive {
		if err := waitOwner(l.ctx, s.Addr(), l.slot, l.addr); err != nil {
			l.tb.Fatalf("redistest: %v", err)
		}
		if err := waitClusterOK(l.ctx, s.Addr()); err != nil {
			l.tb.Fatalf("redistest: cluster node %s: %v", s.Addr(), err)
		}
	}
	return l.addr
}

// CatchUp lets the lagging replica go on, and waits until it has
// everything its master wrote.
func (l *Lag) CatchUp() {
	l.tb.Helper()
	defer l.cancel()
	l.done = true
	l.replica.Resume()
	if err := waitCaughtUp(l.ctx, l.master, l.addr); err != nil {
		l.tb.Fatalf("redistest: %v", err)
	}
}

// node returns the server listening at addr.
func (c *ReplicatedCluster) node(tb testing.TB, addr string) *Server {
	tb.Helper()
	for _, s := range c.nodes {
		if s.Addr() == addr {
			return s
		}
	}
	tb.Fatalf("redistest: no cluster node at %s", addr)
	return nil
}

// stuckInMaster is how much of the replication stream fillReplicaLink
// leaves in the master's own memory: more than one write of the filler,
// so that the kernel's buffers are known to be full.
const stuckInMaster = 4 << 20

// fillReplicaLink writes to the master at master, in key's slot, until
// the link to its replica (stopped) is full: the kernel's buffers of
// the connection hold as much as they take (tens of MB on loopback),
// and the master keeps the rest in its output buffer for the replica
// (CLIENT LIST's omem), which a kill loses. Stopping the replica alone
// is not enough: what the master has handed to the kernel reaches the
// replica once it goes on. The filler stays below the replica's output
// buffer limits, past which the master would drop the replica.
func fillReplicaLink(ctx context.Context, master, key string) error {
	tag := key
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			tag = key[i+1 : i+1+j]
		}
	}
	m := redis.NewClient(&redis.Options{Addr: master})
	defer m.Close()
	filler := "redistest:lag:{" + tag + "}"
	value := strings.Repeat("x", 1<<20)
	for range 128 {
		if err := m.Set(ctx, filler, value, time.Minute).Err(); err != nil {
			return fmt.Errorf("filling the link to the replica of %s: %w", master, err)
		}
		clients, err := m.ClientList(ctx).Result()
		if err != nil {
			return fmt.Errorf("filling the link to the replica of %s: %w", master, err)
		}
		for _, line := range strings.Split(clients, "\n") {
			if !strings.Contains(line, "flags=S") {
				continue
			}
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "omem="); ok {
					if n, _ := strconv.Atoi(v); n >= stuckInMaster {
						return nil
					}
				}
			}
		}
	}
	return fmt.Errorf("the link from %s to its stopped replica never filled", master)
}

// Rejoin starts the master TakeOver killed again, on its port and with
// its data directory, as an operator brings a failed node back: it finds
// its slot taken over and becomes the new master's replica. Rejoin waits
// until that replica's link to its master is up and it has caught up, so
// that writes waiting for a replica there are acknowledged again. Call it
// after TakeOver, from the test's goroutine.
func (l *Lag) Rejoin() {
	l.tb.Helper()
	if l.killed == nil {
		l.tb.Fatalf("redistest: Rejoin before TakeOver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l.killed.Restart()
	l.c.nodes = append(l.c.nodes, l.killed)
	if err := waitReplicasUp(ctx, []string{l.killed.Addr()}, 1); err != nil {
		l.tb.Fatalf("redistest: the node that was killed never rejoined as a replica: %v", err)
	}
	if err := waitCaughtUp(ctx, l.addr, l.killed.Addr()); err != nil {
		l.tb.Fatalf("redistest: %v", err)
	}
}

// Addr returns the address of the lagging replica: a client that must
// not wait on it (it is stopped) leaves it out of its seeds.
func (l *Lag) Addr() string { return l.addr }
