package slackui

import (
	"fmt"
	"strings"

	"github.com/countersign/countersign/agent"
)

// ResultText is the thread reply that shows a call's result.
func ResultText(c agent.Call) string {
	result := c.Result
	// The note telling the model that a person edited the arguments is
	// for the model: people see the edit on the card.
	if c.Editor() != "" {
		if first, rest, ok := strings.Cut(result, "\n"); ok && strings.HasPrefix(first, "Note: ") {
			result = rest
		}
	}
	const limit = 2500
	if len(result) > limit {
		cut := limit
		for cut > 0 && !utf8Start(result[cut]) {
			cut--
		}
		result = result[:cut] + fmt.Sprintf("\n… (%d more bytes)", len(c.Result)-cut)
	}
	icon := "✔️"
	if c.Status == agent.Failed {
		icon = "❌"
	}
	return fmt.Sprintf("%s %s result:\n```\n%s\n```", icon, CodeSpan(c.Tool), slackEscape(strings.ReplaceAll(result, "```", "'''")))
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
