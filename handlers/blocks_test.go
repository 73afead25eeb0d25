package handlers_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

// The buttons and the texts of a published message or view, as the
// Home tab's tests read them (slackui's tests read cards the same way).

type cardButton struct{ actionID, text, style string }

func buttonsOf(t *testing.T, blocks []slack.Block) (buttons []cardButton, values []string) {
	t.Helper()
	for _, b := range blocks {
		a, ok := b.(*slack.ActionBlock)
		if !ok {
			continue
		}
		for _, e := range a.Elements.ElementSet {
			btn, ok := e.(*slack.ButtonBlockElement)
			if !ok {
				t.Fatalf("actions element %T, want a button", e)
			}
			buttons = append(buttons, cardButton{btn.ActionID, btn.Text.Text, string(btn.Style)})
			values = append(values, btn.Value)
		}
	}
	return buttons, values
}

// texts returns every text of the blocks, in order, as one string.
func blockTexts(t *testing.T, v any) string {
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
