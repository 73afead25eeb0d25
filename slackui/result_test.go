package slackui

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/agent"
)

// hostile is text a fetched page could plant for the model to repeat.
const hostile = "<!here> <!channel> ping <@U123> and <#C42|general>, see <https://evil.example|https://good.example> & more"

// live reports markup in s that Slack would turn into a mention or a link.
func live(s string) []string {
	var found []string
	for _, m := range []string{"<!", "<@", "<#", "<http", "<mailto"} {
		if strings.Contains(s, m) {
			found = append(found, m)
		}
	}
	return found
}

func TestResultTextEscapes(t *testing.T) {
	t.Parallel()
	got := ResultText(agent.Call{Tool: "http_request", Status: agent.Done, Result: "HTTP 200\n" + hostile + "\n```\n<!everyone>"})
	if l := live(got); l != nil {
		t.Errorf("ResultText = %q; has live markup %q", got, l)
	}
	if strings.Count(got, "```")%2 != 0 {
		t.Errorf("ResultText = %q; unbalanced code fences", got)
	}
	if !strings.Contains(got, "&lt;!here&gt;") {
		t.Errorf("ResultText = %q; want the text shown escaped", got)
	}
}
