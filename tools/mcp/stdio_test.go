package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// filtered reads all of in through a stdoutFilter, in reads of one byte
// when small, and returns what passed and the lines left out.
func filtered(t *testing.T, in string, small bool) (string, []string) {
	t.Helper()
	var r io.Reader = strings.NewReader(in)
	if small {
		r = iotest.OneByteReader(r)
	}
	var skipped []string
	f := newStdoutFilter(r, func(line []byte) { skipped = append(skipped, string(line)) })
	var out bytes.Buffer
	buf := make([]byte, 7)
	for {
		n, err := f.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
	}
	return out.String(), skipped
}

func TestStdoutFilter(t *testing.T) {
	t.Parallel()
	const msg = `{"jsonrpc":"2.0","id":1,"result":{"text":"a } ] \" \\ {\n"}}`
	tests := []struct {
		name, in, out string
		skipped       []string
	}{
		{"messages only", msg + "\n" + msg + "\n", msg + "\n" + msg + "\n", nil},
		{"banner first", "Server running on stdio\r\n" + msg + "\n", msg + "\n", []string{"Server running on stdio"}},
		{"lines between and after", msg + "\nnpm WARN deprecated\n\n   \n" + msg + "\nbye", msg + "\n" + msg + "\n", []string{"npm WARN deprecated", "bye"}},
		{"a batch", "[" + msg + "," + msg + "]\n", "[" + msg + "," + msg + "]\n", nil},
		{"a value over several lines", "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 2,\n  \"result\": {}\n}\nok\n",
			"{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 2,\n  \"result\": {}\n}\n", []string{"ok"}},
		{"what follows a value on its line stays", msg + " x\n", msg + " x\n", nil},
		{"indented message", "  " + msg + "\n", msg + "\n", nil},
	}
	for _, tt := range tests {
		for _, small := range []bool{false, true} {
			out, skipped := filtered(t, tt.in, small)
			if out != tt.out || !slices.Equal(skipped, tt.skipped) {
				t.Errorf("%s (small reads %v): passed %q, left out %q; want %q, %q", tt.name, small, out, skipped, tt.out, tt.skipped)
			}
		}
	}
	long := strings.Repeat("x", 5000)
	if _, skipped := filtered(t, long+"\n"+msg+"\n", false); len(skipped) != 1 || len(skipped[0]) != maxSkippedKeep {
		t.Errorf("a long line left out was told as %d lines, the first of %d bytes; want one of %d", len(skipped), len(skipped[0]), maxSkippedKeep)
	}
}

// FuzzStdoutFilter: whatever lines that are not JSON come before and
// between them, the messages a server writes reach the decoder whole and
// in order.
func FuzzStdoutFilter(f *testing.F) {
	f.Add("Server running on stdio\nnpm WARN x", `{"a":"}\"{"}`, `[1,{"b":[]}]`)
	f.Add("", `{}`, `{"s":"\\\\"}`)
	f.Add("\r\n\t{oops\n[", `{"x":"\u00e9 ]"}`, `{}`)
	f.Fuzz(func(t *testing.T, noise, a, b string) {
		msgs := []string{a, b}
		for i, m := range msgs {
			var v any
			if json.Unmarshal([]byte(m), &v) != nil || (!strings.HasPrefix(m, "{") && !strings.HasPrefix(m, "[")) {
				t.Skip()
			}
			compact, _ := json.Marshal(v) // one line, as the protocol wants
			msgs[i] = string(compact)
		}
		// Noise is lines that do not begin a JSON value.
		var lines []string
		for _, l := range strings.Split(noise, "\n") {
			if s := strings.TrimLeft(l, " \t\r"); strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[") {
				l = "#" + l
			}
			lines = append(lines, l)
		}
		in := strings.Join(lines, "\n") + "\n" + msgs[0] + "\n" + strings.Join(lines, "\n") + "\n" + msgs[1] + "\n"
		for _, small := range []bool{false, true} {
			out, _ := filtered(t, in, small)
			dec := json.NewDecoder(strings.NewReader(out))
			for _, want := range msgs {
				var got json.RawMessage
				if err := dec.Decode(&got); err != nil || string(got) != want {
					t.Fatalf("decoded %q, %v; want %q (input %q, passed %q)", got, err, want, in, out)
				}
			}
			if dec.More() {
				t.Fatalf("passed %q: more than the messages", out)
			}
		}
	})
}
