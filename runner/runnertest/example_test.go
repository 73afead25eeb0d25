package runnertest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/runner/runnertest"
)

// A store runs the contract from its own tests, giving the suite a
// constructor of fresh stores:
//
//	func TestRunnerStoreContract(t *testing.T) {
//		runnertest.TestStore(t, newStore)
//	}
//
// Here the constructor is the in-memory store's, and the store it makes
// keeps the suite's first rule: a claim is set once, and a second claim
// learns the first one's value.
func Example() {
	var newStore func(t *testing.T) runnertest.Store = func(*testing.T) runnertest.Store {
		return runner.NewMemoryStore(nil)
	}
	s := newStore(nil)
	ctx := context.Background()
	_, won, _ := s.Claim(ctx, "T:C:1", "decision:0.0#0", []byte("approve by U1"))
	winner, wonAgain, _ := s.Claim(ctx, "T:C:1", "decision:0.0#0", []byte("reject by U2"))
	fmt.Println(won, wonAgain, string(winner))
	// Output: true false approve by U1
}
