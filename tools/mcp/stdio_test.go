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
	long := `{"jsonrpc":"2.0","id":2,"result":{"text":"` + strings.Repeat("é", maxHeld) + `"}}`
	tests := []struct {
		name, in, out string
		skipped       []string
	}{
		{"messages only", msg + "\n" + msg + "\n", msg + "\n" + msg + "\n", nil},
		{"banner first", "Server running on stdio\r\n" + msg + "\n", msg + "\n", []string{"Server running on stdio"}},
		{"lines between and after", msg + "\nnpm WARN deprecated\n\n   \n" + msg + "\nbye", msg + "\n" + msg + "\n", []string{"npm WARN deprecated", "bye"}},
		{"a logger's JSON", `{"level":30,"msg":"started"}` + "\n" + msg + "\n", msg + "\n", []string{`{"level":30,"msg":"started"}`}},
		{"brackets that are not JSON", "[INFO] up\n{ v1\n" + msg + "\n", msg + "\n", []string{"[INFO] up", "{ v1"}},
		{"a batch", "[" + msg + "," + msg + "]\n", "[" + msg + "," + msg + "]\n", nil},
		{"a message over several lines, which the protocol forbids", "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 2\n}\n" + msg + "\n", msg + "\n",
			[]string{"{", `"jsonrpc": "2.0",`, `"id": 2`, "}"}},
		{"indented message", "  " + msg + "\r\n", msg + "\r\n", nil},
		{"last message without its line end", msg, msg, nil},
		{"a long message", "hi\n" + long + "\n" + msg + "\n", long + "\n" + msg + "\n", []string{"hi"}},
	}
	for _, tt := range tests {
		for _, small := range []bool{false, true} {
			out, skipped := filtered(t, tt.in, small)
			if out != tt.out || !slices.Equal(skipped, tt.skipped) {
				t.Errorf("%s (small reads %v): passed %.200q, left out %q; want %.200q, %q", tt.name, small, out, skipped, tt.out, tt.skipped)
			}
		}
	}
	longLine := strings.Repeat("x", 5000)
	if _, skipped := filtered(t, longLine+"\n"+msg+"\n", false); len(skipped) != 1 || len(skipped[0]) != maxSkippedKeep {
		t.Errorf("a long line left out was told as %d lines; want one of %d bytes", len(skipped), maxSkippedKeep)
	}
}

// FuzzStdoutFilter: whatever lines that are not JSON-RPC messages come
// before and between them, the messages a server writes reach the
// decoder whole and in order.
func FuzzStdoutFilter(f *testing.F) {
	f.Add("Server running on stdio\nnpm WARN x", `{"a":"}\"{"}`, `[1,{"b":[]}]`)
	f.Add(`{"level":30}`, `{}`, `"\\"`)
	f.Add("\r\n\t{oops\n[", `"\u00e9 ]"`, `null`)
	f.Fuzz(func(t *testing.T, noise, a, b string) {
		var msgs []string
		for _, result := range []string{a, b} {
			var v any
			if json.Unmarshal([]byte(result), &v) != nil {
				t.Skip()
			}
			m, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": len(msgs), "result": v}) // one line, as the protocol wants
			msgs = append(msgs, string(m))
		}
		// Noise is lines that are not JSON: any JSON line is made not so.
		var lines []string
		for _, l := range strings.Split(noise, "\n") {
			if s := strings.TrimSpace(l); json.Valid([]byte(s)) && (strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[")) {
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
