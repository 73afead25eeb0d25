package handlers

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/tools"
)

// A card's button value names its thread, call, round and the hash of
// the arguments it shows, with a token that only the thread's claim for
// that call and round holds, beside the hash's beginning: changing any
// part of the value finds no click, and a value of any other shape is
// not read as a card's.
func TestCardValueNamesOneCall(t *testing.T) {
	t.Parallel()
	hash := tools.ArgsHash("deploy", []byte(`{"env":"prod"}`))
	v := cardValue{token: newCardToken(), call: "3.1", round: 2, hash: hash, thread: "T0TEAM0001:C0CHANNEL01:1700000000.000100"}
	claim := cardClaim(v.token, hash)
	if len(claim) > 40 {
		t.Errorf("a card's claim is %d bytes (%q); want at most 40", len(claim), claim)
	}
	got, ok := parseCardValue(v.String())
	if !ok || got != v {
		t.Fatalf("parseCardValue(%q) = %+v, %v; want %+v", v.String(), got, ok, v)
	}
	rf, ok := got.ref(claim)
	if want := (ref{Thread: v.thread, Call: "3.1", Attempt: 2, Hash: hash}); !ok || rf != want {
		t.Errorf("ref = %+v, %v; want %+v", rf, ok, want)
	}

	flipped := []byte(v.token)
	if flipped[cardTokenLen-1] == 'Q' { // one letter for another
		flipped[cardTokenLen-1] = 'R'
	} else {
		flipped[cardTokenLen-1] = 'Q'
	}
	other := tools.ArgsHash("deploy", []byte(`{"env":"staging"}`))
	for _, forged := range []cardValue{
		{token: newCardToken(), call: v.call, round: v.round, hash: hash, thread: v.thread},
		{token: string(flipped), call: v.call, round: v.round, hash: hash, thread: v.thread},
		{token: v.token, call: v.call, round: v.round, hash: other, thread: v.thread},
	} {
		p, ok := parseCardValue(forged.String())
		if !ok {
			t.Fatalf("parseCardValue(%q) refused a value of the right shape", forged)
		}
		if _, ok := p.ref(claim); ok {
			t.Errorf("value %q, with another token or hash, decides the card", forged)
		}
	}
	// A value that names another thread, call or round is checked against
	// that one's claim, which holds another token.
	for _, named := range []cardValue{
		{token: v.token, call: v.call, round: v.round, hash: hash, thread: "T0TEAM0001:C0CHANNEL01:1700000000.000200"},
		{token: v.token, call: "3.2", round: v.round, hash: hash, thread: v.thread},
		{token: v.token, call: v.call, round: 3, hash: hash, thread: v.thread},
	} {
		p, ok := parseCardValue(named.String())
		if !ok || p.claimKey() == v.claimKey() && p.thread == v.thread {
			t.Errorf("value %q: parsed %+v, %v; want it to name its own call's claim", named, p, ok)
		}
		if _, ok := p.ref(cardClaim(newCardToken(), hash)); ok {
			t.Errorf("value %q decides a card whose claim holds another token", named)
		}
	}

	tail := "|3.1#2|" + hash + "|"
	for _, bad := range []string{
		"", "LTTVOV6C6LBJ6CMKW42BPGIVAW", v.token, v.token + tail,
		v.token + "|3.1|" + hash + "|" + v.thread, v.token + "|3.1#|" + hash + "|" + v.thread,
		v.token + "|3.1#-1|" + hash + "|" + v.thread, v.token + "|3#2|" + hash + "|" + v.thread,
		v.token + "|3.1#2|" + v.thread, v.token + "|3.1#2|" + strings.ToUpper(hash) + "|" + v.thread,
		v.token + "|3.1#2|" + hash[1:] + "|" + v.thread,
		v.token + tail + "T0:C0", v.token + tail + "T0:C0:1|2", v.token + tail + "T0:C0:1 ",
		v.token + "x" + tail + v.thread, tail[1:] + v.thread, v.token + tail + "T0:{C0}:1\n",
		v.token + tail + "T0:C0:" + strings.Repeat("1", maxCardValue),
	} {
		if p, ok := parseCardValue(bad); ok {
			t.Errorf("parseCardValue(%q) = %+v; want no card's value", bad, p)
		}
	}
}

// A claim of a card posted before the claims held the token is a bare
// reference: its buttons keep the reference as their value, and no value
// decides through it.
func TestCardClaimOfAnEarlierCard(t *testing.T) {
	t.Parallel()
	const old = "LTTVOV6C6LBJ6CMKW42BPGIVAW"
	c := agent.Call{Key: "0.0", Tool: "deploy", Args: json.RawMessage(`{}`)}
	if got := cardButtonValue("T0:C0:1.1", c, []byte(old)); got != old {
		t.Errorf("cardButtonValue(an earlier card's claim) = %q, want its reference %q", got, old)
	}
	v := cardValue{token: old[:cardTokenLen], call: "0.0", round: 0, hash: c.RunHash(), thread: "T0:C0:1.1"}
	for _, claim := range []string{old, old[:cardTokenLen], old[:cardTokenLen] + "|"} {
		if _, ok := v.ref([]byte(claim)); ok {
			t.Errorf("a value decides through the claim %q", claim)
		}
	}
}

// FuzzCardValue: whatever a button's value holds, reading it does not
// panic, and a value read as a card's names a thread, call, round and
// hash that are written back as they were read, with a claim key of the
// card's kind.
func FuzzCardValue(f *testing.F) {
	hash := strings.Repeat("0a", 32)
	f.Add("ABCDEFGHIJKLMNOP|3.1#2|" + hash + "|T0TEAM0001:C0CHANNEL01:1700000000.000100")
	f.Add("LTTVOV6C6LBJ6CMKW42BPGIVAW")
	f.Add("ABCDEFGHIJKLMNOP|3.1#2|" + hash + "|T0:C0:1|2")
	f.Add("home:ABCDEFGHIJKLMNOP|0.0#0|" + hash + "|T:C:1")
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := parseCardValue(s)
		if !ok {
			return
		}
		if v.String() != s {
			t.Errorf("parseCardValue(%q) writes back as %q", s, v.String())
		}
		if !strings.HasPrefix(v.claimKey(), "cardref:") || strings.ContainsAny(v.thread, "|\n\r ") || v.round < 0 || !validHash(v.hash) {
			t.Errorf("parseCardValue(%q) = %+v, claim key %q", s, v, v.claimKey())
		}
		if _, ok := v.ref([]byte(s)); ok {
			t.Errorf("value %q decides through a claim holding the value itself", s)
		}
	})
}
