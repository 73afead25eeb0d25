package slackui

import "testing"

func TestTypedText(t *testing.T) {
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
