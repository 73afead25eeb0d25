package handlers_test

import (
	"testing"

	"github.com/slack-go/slack"
)

// The buttons of a published message or view, as the Home tab's tests
// read them (their texts: slackuitest.Texts).

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
