package handlers

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

func TestAnswerText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Deployed *v2*.", "Deployed *v2*."},
		{hostile, "&lt;!here&gt; &lt;!channel&gt; ping &lt;@U123&gt; and &lt;#C42|general&gt;, see &lt;https://evil.example|https://good.example&gt; &amp; more"},
		{"a &amp; b", "a &amp;amp; b"},
		{"```\ncode", "```\ncode\n```"},
		{"```\ncode\n```", "```\ncode\n```"},
		{"see ```x``` and ```", "see ```x``` and ```\n```"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := answerText(tt.in); got != tt.want {
			t.Errorf("answerText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestResultTextEscapes(t *testing.T) {
	got := resultText(agent.Call{Tool: "http_request", Status: agent.Done, Result: "HTTP 200\n" + hostile + "\n```\n<!everyone>"})
	if l := live(got); l != nil {
		t.Errorf("resultText = %q; has live markup %q", got, l)
	}
	if strings.Count(got, "```")%2 != 0 {
		t.Errorf("resultText = %q; unbalanced code fences", got)
	}
	if !strings.Contains(got, "&lt;!here&gt;") {
		t.Errorf("resultText = %q; want the text shown escaped", got)
	}
}

func FuzzAnswerText(f *testing.F) {
	for _, s := range []string{hostile, "```", "a & b", "<<@U1>>", "&lt;!here&gt;", "``` ``` ```"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := answerText(s)
		if strings.ContainsAny(got, "<>") {
			t.Errorf("answerText(%q) = %q; contains < or >", s, got)
		}
		if strings.Count(got, "```")%2 != 0 {
			t.Errorf("answerText(%q) = %q; unbalanced code fences", s, got)
		}
	})
}
