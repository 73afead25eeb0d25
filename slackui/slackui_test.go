package slackui_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/slackui/slackuitest"
)

// disguised is the link a fetched page plants for the model to repeat:
// its label is a URL the reader trusts, its target another.
const disguised = "[https://sso.corp.example/login](https://evil.example/login)"

// hostile is text that tries every markup of both formats.
const hostile = disguised + " ![logo](https://evil.example/x.png) [docs][1]\n\n[1]: https://evil.example\n" +
	"<https://evil.example|https://good.example> <https://evil.example> <a href=\"https://evil.example\">x</a> " +
	"<@U123> <#C42|general> <!here> <!subteam^S1> @channel @here, mail ops@example.com " +
	"https://good.example/\u202eelif.exe"

func TestMarkdown(t *testing.T) {
	t.Parallel()
	const z = "\u200b"
	tests := []struct{ in, want string }{
		{"Deployed **v2**: see https://example.com/notes.", "Deployed **v2**: see https://example.com/notes."},
		{disguised, "[https://sso.corp.example/login]" + z + "(https://evil.example/login)"},
		{"[a][b] and [c]: d", "[a]" + z + "[b]" + z + " and [c]" + z + ": d"},
		{"1 < 2 && <@U1> @here", "1 &lt; 2 &amp;&amp; &lt;@" + z + "U1&gt; @" + z + "here"},
		{"mail ops@example.com", "mail ops@example.com"},
		{"```go\nx := a[i](j) // @here\n```\ndone [x](y)", "```go\nx := a[i](j) // @here\n```\ndone [x]" + z + "(y)"},
		{"```\nopen [a](b)", "```\nopen [a](b)\n```"},
		{"~~~\n[a](b)\n~~~", "~~~\n[a](b)\n~~~"},
		{"- item\n  ```\n[a](b)", "- item\n  ```\n[a]" + z + "(b)"},
		{"1. run\n   ```sh\n   [ -f x ] && make\n   ```\n```\n[a](b)\n```", "1. run\n   ```sh\n   [ -f x ]" + z + " &amp;&amp; make\n   ```\n```\n[a]" + z + "(b)\n```"},
		{"see ```x``` and ```", "see ``" + z + "`x``" + z + "` and ``" + z + "`"},
		{"a\r\nb\rc", "a\nb\nc"},
		{"x\u202ey", "xy"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := slackui.Markdown(tt.in); got != tt.want {
			t.Errorf("Markdown(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := slackuitest.Markdown(slackui.Markdown(hostile)); got != nil {
		t.Errorf("Markdown(hostile) has live markup %v", got)
	}
	if got := slackuitest.Markdown(hostile); len(got) < 10 {
		t.Errorf("the reader finds %v in the hostile text, want every piece of markup", got)
	}
}

func TestMrkdwn(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"Deployed *v2*.", "Deployed *v2*."},
		{"<!here> <@U1> <https://evil.example|https://good.example> & more", "&lt;!here&gt; &lt;@U1&gt; &lt;https://evil.example|https://good.example&gt; &amp; more"},
		{"a &amp; b", "a &amp;amp; b"},
		{"```\ncode", "```\ncode\n```"},
		{"```\ncode\n```", "```\ncode\n```"},
		{"see ```x``` and ```", "see ```x``` and ```\n```"},
		{"x\u2066y", "xy"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := slackui.Mrkdwn(tt.in); got != tt.want {
			t.Errorf("Mrkdwn(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := slackui.MrkdwnInline("a ``` b"); got != "a `\u200b`\u200b` b" {
		t.Errorf("MrkdwnInline(%q) = %q, want the fence broken", "a ``` b", got)
	}
	if got := slackuitest.Mrkdwn(hostile); len(got) < 5 {
		t.Errorf("the reader finds %v in the hostile text, want every piece of markup", got)
	}
}

func TestMrkdwnAsSent(t *testing.T) {
	t.Parallel()
	const z = "\u200b"
	tests := []struct{ in, want string }{
		{"fetch <https://example.com/a?x=1&amp;y=2> if 1 &lt; 2", "fetch <https://example.com/a?x=1&amp;y=2> if 1 &lt; 2"},
		{"ask <@U123|bob> in <#C42|ops>", "ask <@U123> in <#C42>"},
		{"<!here> <!channel> <!subteam^S1|@oncall> deploy", "@" + z + "here @" + z + "channel @" + z + "oncall deploy"},
		{"see <https://evil.example|https://good.example>", "see https://good.example (<https://evil.example>)"},
		{"see <https://example.com|example.com> and <mailto:a@b.c|a@b.c>", "see <https://example.com> and <mailto:a@b.c>"},
		{"odd <javascript:x|y> <a <b> c>", "odd &lt;javascript:x|y&gt; &lt;a &lt;b&gt; c&gt;"},
		{"<!date^1700000000^{date}|Nov 14> &amp; <x", "Nov 14 &amp; &lt;x"},
	}
	for _, tt := range tests {
		if got := slackui.MrkdwnAsSent(tt.in); got != tt.want {
			t.Errorf("MrkdwnAsSent(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPlainText(t *testing.T) {
	t.Parallel()
	if got, want := slackui.PlainText("Deploy <@U1>\x1b[2J\u202e\n\tnow\xff"), "Deploy <@U1>[2J\n\tnow\uFFFD"; got != want {
		t.Errorf("PlainText = %q, want %q", got, want)
	}
}

// seeds are starting points for the fuzz tests.
var seeds = []string{
	disguised, hostile, "```", "```go\n[a](b)\n```\n[c](d)", "~~~\n[a](b)\n~~~~\n[c](d)",
	"````\n```\n[a](b)\n````\n[c](d)", " ```\n[a](b)\n```\n[c](d)", "- x\n  ```\n[a](b)\n```\n[c](d)",
	"a & b", "<<@U1>>", "&lt;!here&gt;", "``` ``` ```", "[a\n](b)", "@@here", "x\r\n```\r\n[a](b)\r",
}

// FuzzMrkdwn: no text comes out of the mrkdwn escapers with a live link
// whose label is not its target, a mention or a broadcast (MrkdwnAsSent
// keeps a person's mentions of people and channels, and nothing else);
// Mrkdwn's code fences are balanced and MrkdwnInline has none; both show
// the text as it was written.
func FuzzMrkdwn(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	unescape := strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&", "\u200b", "")
	f.Fuzz(func(t *testing.T, s string) {
		for name, got := range map[string]string{"Mrkdwn": slackui.Mrkdwn(s), "MrkdwnInline": slackui.MrkdwnInline(s)} {
			want := strings.ReplaceAll(clean(s), "\u200b", "")
			if live := slackuitest.Mrkdwn(got); live != nil {
				t.Errorf("%s(%q) = %q; live: %v", name, s, got, live)
			}
			shown := unescape.Replace(got)
			if name == "Mrkdwn" {
				if strings.Count(got, "```")%2 != 0 {
					t.Errorf("Mrkdwn(%q) = %q; unbalanced code fences", s, got)
				}
				shown = strings.TrimSuffix(strings.TrimSuffix(shown, "```"), "\n")
				want = strings.TrimSuffix(want, "\n")
			} else if strings.Contains(got, "``") {
				t.Errorf("MrkdwnInline(%q) = %q; has a code fence", s, got)
			}
			if shown != want && !strings.HasPrefix(want, shown) {
				t.Errorf("%s(%q) shows %q, want %q", name, s, shown, want)
			}
		}
		// Text as Slack sent it keeps only mentions of people and
		// channels.
		got := slackui.MrkdwnAsSent(s)
		for _, l := range slackuitest.Mrkdwn(got) {
			if l.Kind != "mention" || !(strings.HasPrefix(l.Text, "<@") || strings.HasPrefix(l.Text, "<#")) {
				t.Errorf("MrkdwnAsSent(%q) = %q; live: %v", s, got, l)
			}
		}
	})
}

// FuzzMarkdown: no text comes out of the Markdown escaper with a live
// link whose label is not its target, a mention or a broadcast, read as
// Markdown or (when a streamed message is redrawn) as mrkdwn; it shows
// the text as written; and the text of a growing stream only grows.
func FuzzMarkdown(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	unescape := strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&", "\u200b", "")
	f.Fuzz(func(t *testing.T, s string) {
		full, part := slackui.Markdown(s), slackui.MarkdownPart(s)
		for _, got := range []string{full, part} {
			if live := slackuitest.Markdown(got); live != nil {
				t.Fatalf("Markdown(%q) = %q; live: %v", s, got, live)
			}
			if live := slackuitest.Mrkdwn(got); live != nil {
				t.Fatalf("Markdown(%q) = %q; live as mrkdwn: %v", s, got, live)
			}
		}
		if !strings.HasPrefix(full, part) {
			t.Fatalf("Markdown(%q) = %q does not start with MarkdownPart %q", s, full, part)
		}
		norm := strings.ReplaceAll(strings.ReplaceAll(clean(s), "\r\n", "\n"), "\r", "\n")
		if shown := unescape.Replace(part); shown != strings.ReplaceAll(norm, "\u200b", "") {
			t.Errorf("MarkdownPart(%q) shows %q, want %q", s, shown, norm)
		}
		if !utf8.ValidString(s) {
			return
		}
		// Cut the text at up to 32 places: each prefix's text is a prefix
		// of the whole one's.
		step := max(1, len(s)/32)
		for i := 0; i < len(s); i += step {
			for i < len(s) && !utf8.RuneStart(s[i]) {
				i++
			}
			if p := slackui.MarkdownPart(s[:i]); !strings.HasPrefix(part, p) {
				t.Fatalf("MarkdownPart(%q) = %q is not a prefix of MarkdownPart(%q) = %q", s[:i], p, s, part)
			}
		}
	})
}

// FuzzPlainText: plain text keeps no control that changes how it is
// shown, and escaping twice changes nothing.
func FuzzPlainText(f *testing.F) {
	for _, s := range append(seeds, "\x1b]52;c;aGk=\x07", "a\u2067b\u2069") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := slackui.PlainText(s)
		if live := slackuitest.PlainText(got); live != nil {
			t.Errorf("PlainText(%q) = %q; %v", s, got, live)
		}
		if again := slackui.PlainText(got); again != got {
			t.Errorf("PlainText(PlainText(%q)) = %q, want %q", s, again, got)
		}
	})
}

// clean is the text as the escapers read it: valid UTF-8, without the
// controls that reorder it.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069') {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}
