package agent_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// forEachStore runs test against every store implementation: the
// in-memory one and the real Redis.
func forEachStore(t *testing.T, test func(t *testing.T, newStore func() graph.Store)) {
	t.Run("memory", func(t *testing.T) {
		test(t, func() graph.Store { return graph.NewMemoryStore(graph.MemoryOptions{}) })
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		test(t, func() graph.Store {
			// A fresh prefix per store: packages share one Redis server.
			return redisstore.New(rdb, redisstore.Options{Prefix: "agent-test-" + randomHex()})
		})
	})
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
