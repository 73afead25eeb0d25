package runner

import (
	"context"
	"sync"
)

// A click that lets a paused run go on — the only call waiting, approved
// by one person — costs two steps on the store when they are made apart:
// the decision's claim, then the resumed run's first save, which marks
// the call running before it is sent. Where the store can, the save
// carries the claim instead (SavedClaim): one step that claims the
// decision (set once: the first wins), takes the thread's lease for the
// run, checks that the thread is still at the checkpoint the decision was
// checked against, and writes the resumed run's checkpoint with the
// decision's and the execution's audit entries. See DecideAndDrive.

// ClaimOutcome is what a save that carried a claim did.
type ClaimOutcome int

// The outcomes of a SavedClaim.
const (
	// ClaimSaved: the claim was this decision's, the lease was taken
	// with SavedClaim.Token and the checkpoint saved.
	ClaimSaved ClaimOutcome = iota + 1
	// ClaimLost: another decision held the claim (Winner); nothing of
	// this one was written.
	ClaimLost
	// ClaimBusy: the claim was won and written, with its wake-up and its
	// audit entry, but another process holds the thread's lease: that
	// process applies it. Nothing was saved.
	ClaimBusy
	// ClaimStale: the thread is no longer at the checkpoint the decision
	// was checked against; nothing was written.
	ClaimStale
	// ClaimLeased: the claim was won and the lease taken, but the save
	// was refused (the checkpoint does not follow the stored one): the
	// run goes on from the stored state, under the lease.
	ClaimLeased
)

// SavedClaim is a decision's claim that the first save of the run
// resuming with it carries (WithSavedClaim), for a store that can write
// both in one atomic step (Sessions.ClaimsWithSaves). The claim is
// Claim's as ClaimDecision takes it: Claim.ExpectHead is the checkpoint
// resumed (the save's parent), Claim.LeaseTTL the lease's duration, and
// Claim.Keys the claims to read back. Token fences the save, and is the
// token the same step takes the lease with.
//
// The store writes, in this order and in one step: Claim.Record and
// Claim.Answered once the head is Claim.ExpectHead (else nothing:
// ClaimStale), Claim.WakeBy, the claim (lost: ClaimLost, nothing more),
// Claim.Audit, the lease (held by another: ClaimBusy), then the
// checkpoint with the save's own audit entries (SaveAudit), as Save
// does; and calls Answer with what it did before Save returns. Once
// answered, a later save of the run in the same context carries nothing
// more; and if the claim's save was not made, the store refuses it as
// fenced, at once: the run never held the lease with Token.
//
// A step sent again after its answer was lost finds what its first
// attempt wrote: the store answers it as that attempt did (ClaimSaved,
// its audit entries appended once), never as stale or lost, so that the
// run goes on and its call is sent once.
type SavedClaim struct {
	Claim DecisionClaim
	Token string

	// onAnswer, if set, is told the result as it is recorded.
	onAnswer func(ClaimResult)

	mu       sync.Mutex
	answered bool
	result   ClaimResult
	// lost: the step was sent and no answer came back (see Lost).
	lost bool
	// unconfirmed: the step saved, and the store could not confirm
	// it durable (see Unconfirmed).
	unconfirmed bool
}

// ClaimResult is what a SavedClaim's step did: its outcome, the claim's
// value when it was lost, and the claims of Claim.Keys that are set once
// the lease is taken (ClaimSaved, ClaimLeased). AuditErr is set when the
// checkpoint was saved but the decision's audit entry could not be
// appended after it (the chain moved, and appending it again failed).
type ClaimResult struct {
	Outcome  ClaimOutcome
	Winner   []byte
	Claims   map[string][]byte
	AuditErr error
}

// Answer records what the store did with the claim. It is called once,
// by the store, before the save returns.
func (c *SavedClaim) Answer(r ClaimResult) {
	c.mu.Lock()
	first := !c.answered
	if first {
		c.answered, c.result = true, r
	}
	c.mu.Unlock()
	if first && c.onAnswer != nil {
		c.onAnswer(r)
	}
}

// Lost records that the claim's step was sent and its answer never came
// back, the link to the store down past every resend: the step may have
// run. The store calls it instead of Answer, and refuses a later save of
// the run as fenced without sending the claim again: a step with another
// checkpoint would not be taken for the first attempt, and would find
// the thread moved on by it.
func (c *SavedClaim) Lost() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost = true
}

// Unconfirmed records that the claim's step ran where the store writes
// and saved the checkpoint (the lease taken for Token), but the store
// could not confirm it durable (Redis replicas did not acknowledge it:
// graph.ErrUnconfirmed). What became of the claim is read back, as after
// Lost, as the replicas have it; the run's later saves — the one that
// says its call was not sent after all, and its last — are plain saves,
// fenced by the lease the step took, as after an answered step.
func (c *SavedClaim) Unconfirmed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost, c.unconfirmed = true, true
}

// WasUnconfirmed reports whether Unconfirmed was called.
func (c *SavedClaim) WasUnconfirmed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unconfirmed
}

// WasLost reports whether Lost was called: the claim's step may have run,
// and what became of the claim is read back from the store.
func (c *SavedClaim) WasLost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// Answered returns what the store did with the claim, and whether it
// said.
func (c *SavedClaim) Answered() (ClaimResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.result, c.answered
}

type savedClaimKey struct{}

// WithSavedClaim returns ctx for a run whose first save carries c.
func WithSavedClaim(ctx context.Context, c *SavedClaim) context.Context {
	return context.WithValue(ctx, savedClaimKey{}, c)
}

// SavedClaimOf returns the claim the saves of ctx's run carry, or nil.
func SavedClaimOf(ctx context.Context) *SavedClaim {
	c, _ := ctx.Value(savedClaimKey{}).(*SavedClaim)
	return c
}
