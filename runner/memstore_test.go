package runner_test

import (
	"testing"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/runner/runnertest"
)

func TestMemoryStoreContract(t *testing.T) {
	t.Parallel()
	runnertest.TestStore(t, func(t *testing.T) runnertest.Store { return runner.NewMemoryStore(nil) })
}

func TestMemoryStoreSessionsContract(t *testing.T) {
	t.Parallel()
	runnertest.TestSessions(t, func(t *testing.T) runnertest.Stores {
		cps := graph.NewMemoryStore(graph.MemoryOptions{})
		return runnertest.Stores{Store: runner.NewMemoryStore(nil).WithCheckpoints(cps), Checkpoints: cps}
	})
}

// Without the graph's store, heads are unknown: the rest of the contract
// holds.
func TestMemoryStoreSessionsContractWithoutHeads(t *testing.T) {
	t.Parallel()
	runnertest.TestSessions(t, func(t *testing.T) runnertest.Stores {
		return runnertest.Stores{Store: runner.NewMemoryStore(nil)}
	})
}

func TestMemoryStoreInboxContract(t *testing.T) {
	t.Parallel()
	runnertest.TestInbox(t, func(t *testing.T) runner.Inbox { return runner.NewMemoryStore(nil) })
}

var _ runner.Store = (*runner.MemoryStore)(nil)
