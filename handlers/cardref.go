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
//	<token>|<call>#<round>|<thread>
//
// and the thread's claims hold, under the card's reference claim
// (cardRefKey), the token and the hash of the arguments the card shows:
//
//	<token>|<hash, base64url without padding>
//
// — about 60 bytes in a hash the thread has anyway, where a reference of
// its own was a key with an expiry. The value is untrusted input: a click
// counts only if its token is the one the named thread claimed for the
// named call and round, so a value edited to name another thread, call or
// round finds another token there, or none, and decides nothing. What
// the click decides (thread, call, round, hash) is then read from the
// value and the claim together, as it was from a reference.
//
// A card posted before the values named their thread carries a bare
// reference (refs of their own, under "ref:"), which is looked up as
// before; its claim holds the reference alone.

// cardToken is the random part of a card's value: 80 bits, in base32.
const cardTokenLen = 16

// maxCardValue is the longest button value read as a card's value.
const maxCardValue = 400

var cardTokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// cardValue is what a card's button value names.
type cardValue struct {
	token  string
	call   string
	round  int
	thread string
}

// String is the button value.
func (v cardValue) String() string {
	return v.token + "|" + v.call + "#" + strconv.Itoa(v.round) + "|" + v.thread
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
	round, thread, ok := strings.Cut(rest, "|")
	if !ok {
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
	return cardValue{token: token, call: call, round: attempt, thread: thread}, true
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
	if raw, err := hex.DecodeString(hash); err == nil && len(raw) > 0 {
		hash = base64.RawURLEncoding.EncodeToString(raw)
	} else {
		hash = "=" + hash // not hex: kept as it is
	}
	return []byte(token + "|" + hash)
}

// parseCardClaim reads a card's claim: its token and the hash, or, from a
// card posted before, its bare reference (token "" and ok false).
func parseCardClaim(claim []byte) (token, hash string, ok bool) {
	token, enc, ok := strings.Cut(string(claim), "|")
	if !ok {
		return "", "", false
	}
	if kept, asIs := strings.CutPrefix(enc, "="); asIs {
		return token, kept, true
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", "", false
	}
	return token, hex.EncodeToString(raw), true
}

// ref is what v stands for given claim, the thread's claim under
// v.claimKey(): false unless the claim holds v's token.
func (v cardValue) ref(claim []byte) (ref, bool) {
	token, hash, ok := parseCardClaim(claim)
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(v.token)) != 1 {
		return ref{}, false
	}
	return ref{Thread: v.thread, Call: v.call, Attempt: v.round, Hash: hash}, true
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
	v := cardValue{token: newCardToken(), call: c.Key, round: c.Attempts, thread: thread}
	winner, _, err := store.Claim(ctx, thread, v.claimKey(), cardClaim(v.token, c.RunHash()))
	if err != nil {
		return "", fmt.Errorf("record card reference: %w", err)
	}
	return cardButtonValue(thread, c.Key, c.Attempts, winner), nil
}

// cardButtonValue is the button value of the card of call's round in
// thread whose claim is claim: its token, the call and the thread, or
// for a card posted before, its bare reference.
func cardButtonValue(thread, call string, round int, claim []byte) string {
	token, _, ok := parseCardClaim(claim)
	if !ok {
		return string(claim)
	}
	return cardValue{token: token, call: call, round: round, thread: thread}.String()
}
