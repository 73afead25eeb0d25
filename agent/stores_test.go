package agent_test

import (
	"testing"

	"github.com/countersign/countersign/graph"
)

// forEachStore runs test against every store implementation.
func forEachStore(t *testing.T, test func(t *testing.T, newStore func() graph.Store)) {
	t.Run("memory", func(t *testing.T) {
		test(t, func() graph.Store { return graph.NewMemoryStore(graph.MemoryOptions{}) })
	})
}
