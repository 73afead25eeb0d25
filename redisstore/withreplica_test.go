package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// withReplica is a redis-server with one replica, for the tests of
// writes that wait for replicas (Options.Replicas): a client of each, and
// two stores under one prefix that wait for the replica. s gives it the
// bot's default time: a replica that answers may be slow to on a busy
// machine (within the client's read timeout). stalled gives it little,
// for writes made with the replica stopped, whose acknowledgement never
// comes.
type withReplica struct {
	replica        *redistest.Server
	rdb, onReplica *redis.Client
	prefix         string
	s, stalled     *redisstore.Store
}

func newWithReplica(t *testing.T, name string) withReplica {
	t.Helper()
	master := redistest.StartServer(t)
	w := withReplica{replica: redistest.StartReplica(t, master), prefix: uniqueName(name)}
	w.rdb = redis.NewClient(&redis.Options{Addr: master.Addr()})
	w.onReplica = redis.NewClient(&redis.Options{Addr: w.replica.Addr()})
	t.Cleanup(func() { w.rdb.Close(); w.onReplica.Close() })
	w.s = redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix, Replicas: 1, ReplicaTimeout: 2 * time.Second})
	w.stalled = redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix, Replicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	return w
}
