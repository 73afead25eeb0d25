// Package handlers is Countersign's Slack front end: HTTP ingress for
// slash commands, events and interactions (and Socket Mode), the Reporter
// that posts a conversation's progress into its Slack thread, and the
// Home tab's publisher (home.go: each person's inbox, decided like the
// cards). The cards, modals, views and texts it posts, and the action IDs
// it dispatches clicks on, are package slackui's; requests are checked
// by package slacksig, user groups and channel members looked up by
// package slackdir (which Slack's membership change events mark as to be
// asked again: membership.go), and rate-limited Slack calls retried by
// package slackretry. Every request is answered within Slack's three seconds;
// the rest is background work (see Server).
//
// A conversation's thread key is "<team>:<channel>:<root ts>"; the
// Reporter finds where to post from it. A card's buttons carry in their
// values the thread, the call and a token that the thread's claims must
// hold for that call (cardref.go); a value grants nothing by itself — every click goes to runner.Decide, which checks it
// against the policy, the card's channel (or that of a recorded copy of
// the card: copies.go) and the arguments' hash. The handlers make no
// decision of their own.
//
// Answers are shown as the model writes them: one message that grows
// (Slack's streaming methods, or chat.update) and that the final answer
// finishes; see stream.go. Every text from the model, a tool or a person
// is escaped by package slackui for the format it is sent in.
//
// A tool's request for input during a call is not a decision on a call
// and does not go through the runner: package elicit posts it in the
// thread, only the person who asked for the run may answer it (elicit.go
// here takes the answers), and the answer reaches the waiting call
// through the store's mailbox.
//
// The package does not run agents or keep state of its own: the runner
// does the first, the store the second.
package handlers

import (
	"context"
	"time"
)

// Store is what the handlers keep in Redis besides the runner's data.
type Store interface {
	// Dedup reports whether key is seen for the first time, and remembers
	// it for ttl. Retried deliveries are recognised by it.
	Dedup(ctx context.Context, key string, ttl time.Duration) (bool, error)
	// PutRef and Ref keep the opaque references that the buttons of
	// error cards, of cards redrawn with approvals, and of cards posted
	// before the card's claim held its token carry.
	PutRef(ctx context.Context, ref string, value []byte, ttl time.Duration) error
	Ref(ctx context.Context, ref string) ([]byte, bool, error)
	// SwapRef stores a reference and returns what it held before, in one
	// step.
	SwapRef(ctx context.Context, ref string, value []byte, ttl time.Duration) ([]byte, bool, error)
	// Claim, ClaimValues and Claims keep set-once records per thread:
	// here, the ts of the card posted for each call and of its copies.
	// ClaimValues reads the records of keys (those set): what a card's
	// round needs, whatever the thread's history; Claims reads them all,
	// only for rounds recorded before their copies had an index.
	Claim(ctx context.Context, thread, key string, value []byte) (winner []byte, won bool, err error)
	ClaimValues(ctx context.Context, thread string, keys []string) (map[string][]byte, error)
	Claims(ctx context.Context, thread string) (map[string][]byte, error)
	// ClaimAll, DedupRef (Dedup, then Ref) and DedupClaim (Dedup, then
	// a thread's claim) are one step each on a single server.
	ClaimAll(ctx context.Context, thread string, values map[string][]byte) (map[string][]byte, error)
	DedupRef(ctx context.Context, key string, ttl time.Duration, ref string) (first bool, value []byte, found bool, err error)
	DedupClaim(ctx context.Context, key string, ttl time.Duration, thread, claim string) (first bool, value []byte, found bool, err error)
	// Ping reports whether the store is reachable.
	Ping(ctx context.Context) error

	// Accept records a request under id before it is acknowledged, held
	// by the attempt whose token is token until due; false if id was
	// recorded already (a repeated delivery). One round trip.
	Accept(ctx context.Context, id, token string, record []byte, due time.Time, ttl time.Duration) (bool, error)
	// UpdateIntake replaces an accepted request's record and renews its
	// hold until "until", only while token holds it; false if it does
	// not (another attempt has the request).
	UpdateIntake(ctx context.Context, id, token string, record []byte, until time.Time) (bool, error)
	// HoldIntake renews the hold of each request of holds (id to token)
	// that its token still holds and that has not started, until
	// "until", and returns the ids it renewed.
	HoldIntake(ctx context.Context, holds map[string]string, until time.Time) (map[string]bool, error)
	// Started says the request no longer needs driving, if token holds
	// it.
	Started(ctx context.Context, id, token string) error
	// DueIntake takes up to n accepted requests whose hold has lapsed,
	// each now held by token until "until"; several processes may call
	// it at once and each request goes to one of them.
	DueIntake(ctx context.Context, token string, now, until time.Time, n int) (map[string][]byte, error)
	// LetGoIntake lets go of a request token holds: its record is
	// replaced and nobody holds it until due (let). If TakeIntake asked
	// for it meanwhile, token keeps it, held until "until", and goes on
	// with it (goOn).
	LetGoIntake(ctx context.Context, id, token string, record []byte, due, until time.Time) (let, goOn bool, err error)
	// TakeIntake gives a request that was let go, and has not started,
	// to a new attempt held by token until "until", and returns its
	// record; one still held is marked for its holder to go on with.
	TakeIntake(ctx context.Context, id, token string, until time.Time) ([]byte, error)
}
