package slacksim

import "testing"

func TestTypedTextIsSentAsSlackSendsIt(t *testing.T) {
	sim := New(Options{BotURL: "http://127.0.0.1:1", SigningSecret: "s"})
	tests := []struct {
		typed, want string
	}{
		{"plain words", "plain words"},
		{"a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"},
		{"@Countersign fetch it", "<@U0COUNTERSIGN> fetch it"},
		{"thanks @teammate.", "thanks <@U0TEAMMATE>."},
		{"@nobody here", "@nobody here"},
		{"<@U0YOU> typed in Slack's form", "<@U0YOU> typed in Slack's form"},
		{"<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"},
		{"fetch https://example.com/a?b=1&c=2.", "fetch <https://example.com/a?b=1&amp;c=2>."},
		{"see http://127.0.0.1:8080/x, then", "see <http://127.0.0.1:8080/x>, then"},
	}
	for _, tt := range tests {
		if got := sim.typed(tt.typed); got != tt.want {
			t.Errorf("typed(%q) = %q, want %q", tt.typed, got, tt.want)
		}
	}
}
