package tools

import (
	"strings"
	"testing"
)

// The arguments models mostly send take the fast way, and come out as the
// slow way writes them: compact, keys sorted, escapes as written.
func TestCanonicalFastTakesCommonArguments(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"method":"GET","url":"https://status.example.com/health"}`, `{"method":"GET","url":"https://status.example.com/health"}`},
		{"{\n  \"url\": \"https://a.example/x?a=1&b=<2>\",\n  \"method\": \"POST\",\n  \"body\": \"{\\\"v\\\":\\\"2\\\"}\\n\"\n}",
			`{"body":"{\"v\":\"2\"}\n","method":"POST","url":"https://a.example/x?a=1&b=<2>"}`},
		{`{"a!":1,"a":[true,false,null,-0.5e3,{"z":{},"y":[]}],"é":"ü"}`, `{"a":[true,false,null,-0.5e3,{"y":[],"z":{}}],"a!":1,"é":"ü"}`},
		{` [ 1 , "x" ] `, `[1,"x"]`},
		{`{}`, `{}`},
		{`"\b\f\t\r\\"`, `"\b\f\t\r\\"`},
	}
	for _, tt := range tests {
		got, ok := canonicalFast([]byte(tt.in))
		if !ok || string(got) != tt.want {
			t.Errorf("canonicalFast(%q) = %q, %v; want %q, true", tt.in, got, ok, tt.want)
		}
	}
}

// What the fast way leaves to the slow one: whatever it would write
// otherwise, and whatever Canonical refuses.
func TestCanonicalFastLeavesTheRest(t *testing.T) {
	for _, in := range []string{
		`{"u":"a\/b"}`,             // \/ is written as /
		`{"u":"\u00e9"}`,           // \u is written as the character
		`{"\u006d":"x"}`,           // an escaped key
		`{"m":"GET","m":"DELETE"}`, // a duplicate key
		"{\"s\":\"\u2028\"}",       // written escaped
		"{\"s\":\"\ufffd\"}",       // refused
		`{"a":1}{"a":2}`,           // data after the value
		"{\"s\":\"\xff\"}",         // not UTF-8
		`{"a":`,                    // cut short
		strings.Repeat("[", 33) + strings.Repeat("]", 33), // too deep
		`"` + strings.Repeat("x", MaxArgsLen) + `"`,       // too long
	} {
		if got, ok := canonicalFast([]byte(in)); ok {
			t.Errorf("canonicalFast(%.40q) = %.40q, true; want it left to the slow way", in, got)
		}
	}
}

// FuzzCanonicalFast checks that where the fast way answers, it answers
// what the slow way does, byte for byte: a stored approval is bound to
// the hash of that form.
func FuzzCanonicalFast(f *testing.F) {
	for _, s := range []string{
		`{"method":"GET","url":"https://a.example/"}`,
		`{"a":{"b":[1,2,{"c":"\n"}]},"d":-0.5e3,"a ":0,"a!":[]}`,
		`{"m":"GET","\u006d":"DELETE"}`, `{"a":1}{"a":2}`, `"\ud83d\ude00"`, `[]`, `null`, `{"":""}`,
		"{\"k\":\"\\b\\f\\u0001\\u007f\u2028\u2029<>&\\\\\\\"\",\"j\":[{\"b\":1,\"a\":{\"d\":[],\"c\":{}}}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fast, ok := canonicalFast(in)
		if !ok {
			return
		}
		slow, err := canonicalSlow(in)
		if err != nil || string(fast) != string(slow) {
			t.Fatalf("canonicalFast(%q) = %q; the slow way: %q, %v", in, fast, slow, err)
		}
	})
}
