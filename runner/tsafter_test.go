package runner_test

import (
	"math/big"
	"strings"
	"testing"

	"github.com/countersign/countersign/runner"
)

// TestTSAfter: a kept reply is part of a conversation only if Slack
// stamped it after the mention that started it; stamps compare as the
// numbers they are, whatever their lengths.
func TestTSAfter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"1700000000.000200", "1700000000.000100", true},
		{"1700000000.000100", "1700000000.000100", false},
		{"1700000000.000100", "1700000000.000200", false},
		{"1700000001.000000", "1700000000.999999", true},
		{"999999999.999999", "1700000000.000000", false},
		{"1700000000.5", "1700000000.499999", true},
		{"1700000000.50", "1700000000.5", false},
		{"01700000000.1", "1700000000.1", false},
		{"1700000000", "1699999999.9", true},
		{" 1700000000.2", "1700000000.1", true},
		// Not stamps: compared as strings.
		{"1e999999", "1700000000.000100", true}, // "e" after "7", at once
		{"b", "a", true},
	} {
		if got := runner.TSAfter(tt.a, tt.b); got != tt.want {
			t.Errorf("TSAfter(%q, %q) = %t, want %t", tt.a, tt.b, got, tt.want)
		}
	}
}

// FuzzTSAfter holds the order of stamps of digits to the order of the
// numbers they write, and every order to be strict: never both ways.
func FuzzTSAfter(f *testing.F) {
	f.Add("1700000000.000200", "1700000000.000100")
	f.Add("0.5", "00.50")
	f.Add("1e5", "100000")
	f.Fuzz(func(t *testing.T, a, b string) {
		ab, ba := runner.TSAfter(a, b), runner.TSAfter(b, a)
		if ab && ba {
			t.Fatalf("%q and %q are each after the other", a, b)
		}
		if !isStamp(a) || !isStamp(b) {
			return
		}
		x, _ := new(big.Rat).SetString(strings.TrimSpace(a))
		y, _ := new(big.Rat).SetString(strings.TrimSpace(b))
		if want := x.Cmp(y) > 0; ab != want {
			t.Fatalf("TSAfter(%q, %q) = %t, want %t", a, b, ab, want)
		}
	})
}

// isStamp reports whether s is digits, then optionally a dot and digits.
func isStamp(s string) bool {
	sec, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	if sec == "" || len(s) > 64 {
		return false
	}
	for _, part := range []string{sec, frac} {
		for _, r := range part {
			if r < '0' || r > '9' {
				return false
			}
		}
	}
	return true
}
