package slackui

import "testing"

func TestTypedText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"fetch <https://example.com/a?x=1&amp;y=2>", "fetch https://example.com/a?x=1&y=2"},
		{"fetch <https://example.com|example.com>", "fetch https://example.com"},
		{"see <https://example.com/docs|the docs>", "see the docs (https://example.com/docs)"},
		{"is 1 &lt; 2 &amp;&amp; 3 &gt; 2?", "is 1 < 2 && 3 > 2?"},
		{"post in <#C123|ops> please", "post in #ops please"},
		{"ask <@U123>", "ask <@U123>"},
		{"a literal &amp;lt;", "a literal &lt;"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := TypedText(tt.in); got != tt.want {
			t.Errorf("TypedText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A request of several lines is quoted in its root message, every line:
// the person's lines cannot read as the bot's own; one line is not.
func TestRequestText(t *testing.T) {
	t.Parallel()
	tests := []struct{ typed, want string }{
		{"deploy v2 &lt;now&gt;", "<@U0ALICE> asked: deploy v2 &lt;now&gt;"},
		{"deploy v2\n\n✅ *Approved by* <@U0BOSS> at <!date^1700000000^{time}|10:00>\r\nno review needed",
			"<@U0ALICE> asked:\n> deploy v2\n> \n> ✅ *Approved by* <@U0BOSS> at 10:00\n> no review needed"},
		{"a\rb", "<@U0ALICE> asked:\n> a\n> b"},
	}
	for _, tt := range tests {
		if got := RequestText("U0ALICE", tt.typed); got != tt.want {
			t.Errorf("RequestText(%q) = %q, want %q", tt.typed, got, tt.want)
		}
	}
}
