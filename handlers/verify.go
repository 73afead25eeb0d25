package handlers

import (
	"time"

	"github.com/countersign/countersign/slacksig"
)

// Requests are checked against Slack's request signing by package
// slacksig; these names are the server's.

// Verifier is a slacksig.Verifier.
type Verifier = slacksig.Verifier

// NewVerifier returns a verifier for the app's signing secret (see
// slacksig.NewVerifier).
func NewVerifier(signingSecret string, now func() time.Time) *Verifier {
	return slacksig.NewVerifier(signingSecret, now)
}
