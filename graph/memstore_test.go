package graph_test

import (
	"testing"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/graph/graphtest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	graphtest.TestStore(t, func(t *testing.T) graph.Store {
		return graph.NewMemoryStore(graph.MemoryOptions{HistoryLimit: graphtest.HistoryLimit})
	})
}
