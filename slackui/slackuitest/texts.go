package slackuitest

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

// Texts returns every "text" of a message's or a view's blocks (any
// value that encodes to Block Kit JSON), in a fixed order, as one string:
// what a test reads to see what a person is shown.
func Texts(t testing.TB, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if s, ok := v["text"].(string); ok {
				out = append(out, s)
			}
			for _, k := range slices.Sorted(maps.Keys(v)) {
				walk(v[k])
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	walk(generic)
	return strings.Join(out, "\n")
}
