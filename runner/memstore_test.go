package runner_test

import (
	"testing"

	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/runner/runnertest"
)

func TestMemoryStoreContract(t *testing.T) {
	runnertest.TestStore(t, func(t *testing.T) runnertest.Store { return runner.NewMemoryStore(nil) })
}

func TestMemoryStoreInboxContract(t *testing.T) {
	runnertest.TestInbox(t, func(t *testing.T) runner.Inbox { return runner.NewMemoryStore(nil) })
}

var (
	_ runner.Inbox    = (*runner.MemoryStore)(nil)
	_ runner.Store    = (*runner.MemoryStore)(nil)
	_ runner.Schedule = (*runner.MemoryStore)(nil)
	_ runner.Auditor  = (*runner.MemoryStore)(nil)
)
