package slackuitest

import "testing"

func TestMarkdownFinds(t *testing.T) {
	tests := []struct{ in, want string }{
		{"[https://good.example](https://evil.example)", "link"},
		{"![https://good.example](https://evil.example/x.png)", "link"},
		{"[label\nacross lines](<https://evil.example> \"title\")", "link"},
		{"[a][1]\n\n[1]: https://evil.example", "reference"},
		{"<https://evil.example>", "markup"},
		{"<a href=\"https://evil.example\">x</a>", "markup"},
		{"<!here> <@U1>", "markup"},
		{"ping @channel now", "broadcast"},
		{"x ```\n[a](b)", "link"},
		{"  ```\n[a](b)\n```", "link"},
		{"- x\n  ```\n[a](b)", "link"},
		{"- x\n  ```\n```\n[a](b)\n```", "link"},
		{"https://good.example/\u202eexe.txt", "reordering"},
		{"```\n[a](b)\n", ""},
		{"```\n[a](b)\n```\n[c](d)", "link"},
		{"````\n```\n[a](b)\n````\n", ""},
		{"[https://x.example](https://x.example) and https://y.example", ""},
		{"mail ops@channel.example", ""},
	}
	for _, tt := range tests {
		got := Markdown(tt.in)
		switch {
		case tt.want == "" && got != nil:
			t.Errorf("Markdown(%q) = %v, want nothing live", tt.in, got)
		case tt.want != "" && !has(got, tt.want):
			t.Errorf("Markdown(%q) = %v, want a %s", tt.in, got, tt.want)
		}
	}
}

func TestMrkdwnFinds(t *testing.T) {
	tests := []struct{ in, want string }{
		{"<https://evil.example|https://good.example>", "link"},
		{"<@U1> and <#C1|general>", "mention"},
		{"<!subteam^S1|@ops>", "mention"},
		{"<https://good.example> [a](b) &lt;!here&gt;", ""},
		{"<https://good.example|https://good.example>", ""},
	}
	for _, tt := range tests {
		got := Mrkdwn(tt.in)
		switch {
		case tt.want == "" && got != nil:
			t.Errorf("Mrkdwn(%q) = %v, want nothing live", tt.in, got)
		case tt.want != "" && !has(got, tt.want):
			t.Errorf("Mrkdwn(%q) = %v, want a %s", tt.in, got, tt.want)
		}
	}
}

func has(found []Finding, kind string) bool {
	for _, f := range found {
		if f.Kind == kind {
			return true
		}
	}
	return false
}
