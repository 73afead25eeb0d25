package cyclebench_test

import (
	"testing"

	"github.com/countersign/countersign/internal/cyclebench"
)

// The memory table groups keys by kind: one row per kind, whatever the
// thread or the ID in the key.
func TestKindOf(t *testing.T) {
	for key, want := range map[string]string{
		"cs:{T1:C1:1700000000.000100}:journal":        "cs:{T}:journal",
		"cs:{T2:C9:1700000001.000200}:claims":         "cs:{T}:claims",
		"cs:ref:LTTVOV6C6LBJ6CMKW42BPGIVAW":           "cs:ref:*",
		"cs:ref:7LKCWCST22DGFBW*NN4B3":                "cs:ref:*",
		"cs:dedup:0123456789abcdef":                   "cs:dedup:*",
		"cs:{intake}:req:command:trigger1700000000.5": "cs:{intake}:req:command:trigger*",
		"cs:wakeups":       "cs:wakeups",
		"cs:{inbox}:calls": "cs:{inbox}:calls",
	} {
		if got := cyclebench.KindOf(key); got != want {
			t.Errorf("KindOf(%q) = %q, want %q", key, got, want)
		}
	}
}
