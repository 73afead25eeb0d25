package handlers

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/slackui"
)

// A card's buttons name what they decide in their value, which Slack
// sends back with a click:
//
//	<token>|<call>#<round>|<hash of the arguments it shows>|<thread>
//
// and the thread's claims hold, under the card's reference claim
// (cardRefKey), the token and the first 12 bytes of the hash:
//
//	<token>|<hash's first 12 bytes, base64url without padding>
//
// — 33 bytes in a hash the thread has anyway, where a reference of its
// own was a key with an expiry. The value is untrusted input: a click
// counts only if its token is the one the named thread claimed for the
// named call and round, and its hash begins as the claimed one. A value
// edited to name another thread, call or round finds another token
// there, or none, and decides nothing; one edited to carry other
// arguments' hash would need a hash of them that agrees with the card's
// in 96 bits. What the click decides (thread, call, round, hash) is then
// the value's, as it was a reference's.
//
// A card posted before the values named their thread carries a bare
// reference (refs of their own, under "ref:"), which is looked up as
// before; its claim holds the reference alone.

// cardTokenLen is the length of the random part of a card's value: 80
// bits, in base32.
const cardTokenLen = 16

// cardHashLen is the length of a hash of arguments (tools.ArgsHash: hex
// SHA-256); cardHashKept is how many of its bytes a card's claim keeps.
const (
	cardHashLen  = 64
	cardHashKept = 12
)

// maxCardValue is the longest button value read as a card's value.
const maxCardValue = 400

var cardTokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// cardValue is what a card's button value names.
type cardValue struct {
	token  string
	call   string
	round  int
	hash   string
	thread string
}

// String is the button value.
func (v cardValue) String() string {
	return v.token + "|" + v.call + "#" + strconv.Itoa(v.round) + "|" + v.hash + "|" + v.thread
}

// claimKey is the claim that holds the card's token.
func (v cardValue) claimKey() string { return cardRefKey(v.call, v.round) }

// parseCardValue reads a button value of a card; false if it is not one
// (a bare reference of a card posted before, or anything else).
func parseCardValue(s string) (cardValue, bool) {
	if len(s) > maxCardValue {
		return cardValue{}, false
	}
	token, rest, ok := strings.Cut(s, "|")
	if !ok || !validToken(token) {
		return cardValue{}, false
	}
	round, rest, ok := strings.Cut(rest, "|")
	if !ok {
		return cardValue{}, false
	}
	hash, thread, ok := strings.Cut(rest, "|")
	if !ok || !validHash(hash) {
		return cardValue{}, false
	}
	call, n, ok := strings.Cut(round, "#")
	if !ok || !validCallKey(call) || !digits(n, 4) {
		return cardValue{}, false
	}
	attempt, err := strconv.Atoi(n)
	if err != nil {
		return cardValue{}, false
	}
	if _, _, _, err := slackui.ParseThread(thread); err != nil || !printable(thread) {
		return cardValue{}, false
	}
	return cardValue{token: token, call: call, round: attempt, hash: hash, thread: thread}, true
}

// validHash reports whether s has the form of a hash of arguments:
// lowercase hex, cardHashLen digits.
func validHash(s string) bool {
	if len(s) != cardHashLen {
		return false
	}
	for i := range len(s) {
		if (s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}

// validToken reports whether s has the form of a card's token.
func validToken(s string) bool {
	if len(s) != cardTokenLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// validCallKey reports whether s has the form of a call's key,
// "<turn>.<index>".
func validCallKey(s string) bool {
	turn, index, ok := strings.Cut(s, ".")
	return ok && digits(turn, 9) && digits(index, 9)
}

// digits reports whether s is 1 to max decimal digits.
func digits(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// printable reports whether s is printable ASCII without "|".
func printable(s string) bool {
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == '|' {
			return false
		}
	}
	return true
}

// cardClaim is the stored form of a card's token and hash.
func cardClaim(token, hash string) []byte {
	return []byte(token + "|" + hashKept(hash))
}

// hashKept is what a card's claim keeps of hash: its first cardHashKept
// bytes in base64url, or "" if it is not a hash of arguments.
func hashKept(hash string) string {
	if !validHash(hash) {
		return ""
	}
	raw, _ := hex.DecodeString(hash[:2*cardHashKept])
	return base64.RawURLEncoding.EncodeToString(raw)
}

// parseCardClaim reads a card's claim: its token and what it keeps of
// the hash, or, from a card posted before, its bare reference (ok false).
func parseCardClaim(claim []byte) (token, kept string, ok bool) {
	return strings.Cut(string(claim), "|")
}

// ref is what v stands for given claim, the thread's claim under
// v.claimKey(): false unless the claim holds v's token and the
// beginning of its hash.
func (v cardValue) ref(claim []byte) (ref, bool) {
	token, kept, ok := parseCardClaim(claim)
	if !ok || kept == "" || subtle.ConstantTimeCompare([]byte(token), []byte(v.token)) != 1 || kept != hashKept(v.hash) {
		return ref{}, false
	}
	return ref{Thread: v.thread, Call: v.call, Attempt: v.round, Hash: v.hash}, true
}

// newCardToken returns a fresh card token.
func newCardToken() string {
	var b [cardTokenLen * 5 / 8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return cardTokenEncoding.EncodeToString(b[:])
}

// newCardRef records a token for c's card in thread, unless one was
// recorded meanwhile, and returns the card's button value for the one
// recorded.
func newCardRef(ctx context.Context, store Store, thread string, c agent.Call) (string, error) {
	hash := c.RunHash()
	v := cardValue{token: newCardToken(), call: c.Key, round: c.Attempts, hash: hash, thread: thread}
	winner, _, err := store.Claim(ctx, thread, v.claimKey(), cardClaim(v.token, hash))
	if err != nil {
		return "", fmt.Errorf("record card reference: %w", err)
	}
	return cardButtonValue(thread, c, winner), nil
}

// cardButtonValue is the button value of the card of c's round in thread
// whose claim is claim: its token, c and the hash of c's arguments, and
// the thread; or for a card posted before, its bare reference. (Should
// c's arguments have changed since the card was posted, its value does
// not agree with the claim, and its click decides nothing, as the
// card's own click would not: the runner checks the hash.)
func cardButtonValue(thread string, c agent.Call, claim []byte) string {
	token, _, ok := parseCardClaim(claim)
	if !ok {
		return string(claim)
	}
	return cardValue{token: token, call: c.Key, round: c.Attempts, hash: c.RunHash(), thread: thread}.String()
}
