package slackui

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzVisibleJSON: visibleJSON leaves no invisible character, and JSON
// it is given still decodes to the same value.
func FuzzVisibleJSON(f *testing.F) {
	f.Add(`{"branch":"ma` + "\u200b" + `in"}`)
	f.Add(`["payroll` + "\u202e" + `txt.exe","` + "\U000E0041\U000E0042" + `"]`)
	f.Add(`{"ser` + "\u00ad" + `vice":"\u200b","e":"❤️‍🔥","c1":"` + "\u009b" + `2J"}`)
	f.Add("not json \ufeff\U000E0100 \xff")
	f.Fuzz(func(t *testing.T, s string) {
		out := visibleJSON(s)
		if i := strings.IndexFunc(out, invisible); i >= 0 {
			t.Fatalf("visibleJSON(%q) = %q keeps %U", s, out, []rune(out[i:])[0])
		}
		var in, back any
		if json.Unmarshal([]byte(s), &in) != nil {
			return
		}
		if err := json.Unmarshal([]byte(out), &back); err != nil {
			t.Fatalf("visibleJSON(%q) = %q, not JSON: %v", s, out, err)
		}
		if !reflect.DeepEqual(in, back) {
			t.Fatalf("visibleJSON(%q) = %q decodes to %#v, want %#v", s, out, back, in)
		}
	})
}
