package tools_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/tools"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"sorts keys and compacts", `{ "url": "https://a.example/x", "method": "GET" }`, `{"method":"GET","url":"https://a.example/x"}`},
		{"nested", `{"b":[1, {"z":true,"a":null}],"a":"x"}`, `{"a":"x","b":[1,{"a":null,"z":true}]}`},
		{"numbers as written", `{"n": 1e400, "m": 12345678901234567890}`, `{"m":12345678901234567890,"n":1e400}`},
		{"escapes read once", `{"k":"\u0041\n<>&"}`, `{"k":"A\n<>&"}`},
		{"not an object", `[1,2]`, `[1,2]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tools.Canonical(json.RawMessage(tt.in))
			if err != nil || string(got) != tt.want {
				t.Errorf("Canonical(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestCanonicalRefusesWhatReadersDisagreeOn is the attack the card must
// not fall for: arguments whose first key is shown and whose last key runs.
func TestCanonicalRefusesWhatReadersDisagreeOn(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", 3000)
	tests := []struct{ name, in string }{
		{"duplicate key", `{"method":"GET","url":"https://a.example/shown","pad":"` + pad + `","method":"DELETE","url":"https://a.example/hidden"}`},
		{"duplicate key through an escape", `{"method":"GET","\u006dethod":"DELETE"}`},
		{"duplicate key in a nested object", `{"headers":{"A":"1","A":"2"}}`},
		{"trailing value", `{"method":"GET"} {"method":"DELETE"}`},
		{"trailing garbage", `{"method":"GET"}x`},
		{"lone surrogate", `{"url":"https://a.example/\ud800"}`},
		{"invalid UTF-8", "{\"url\":\"\xff\"}"},
		{"empty", ``},
		{"cut short", `{"method":`},
		{"too deep", strings.Repeat("[", 40) + strings.Repeat("]", 40)},
		{"too long", `{"body":"` + strings.Repeat("y", tools.MaxArgsLen) + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tools.Canonical(json.RawMessage(tt.in))
			if !errors.Is(err, tools.ErrAmbiguousArgs) {
				t.Errorf("Canonical(%.60s) = %.60s, %v; want ErrAmbiguousArgs", tt.in, got, err)
			}
		})
	}
}

func TestArgsHashBindsToolAndArguments(t *testing.T) {
	t.Parallel()
	a := tools.ArgsHash("http_request", json.RawMessage(`{"method":"GET"}`))
	if b := tools.ArgsHash("http_request", json.RawMessage(`{"method":"GET"}`)); a != b {
		t.Errorf("ArgsHash is not stable: %s, %s", a, b)
	}
	for _, other := range []string{
		tools.ArgsHash("http_request", json.RawMessage(`{"method":"DELETE"}`)),
		tools.ArgsHash("http_reques", json.RawMessage(`t{"method":"GET"}`)),
	} {
		if other == a {
			t.Errorf("ArgsHash collides: %s", a)
		}
	}
	if len(a) != 64 || tools.ShortHash(a) != a[:12] {
		t.Errorf("ArgsHash = %q, ShortHash = %q; want 64 hex digits and their first 12", a, tools.ShortHash(a))
	}
}

// FuzzCanonical checks that what Canonical accepts, it accepts once and
// for all: the canonical form is canonical again, and encoding/json reads
// the input and the canonical form as the same value.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"method":"GET","url":"https://a.example/"}`,
		`{"a":{"b":[1,2,{"c":"\u00e9"}]},"d":-0.5e3}`,
		`{"m":"GET","\u006d":"DELETE"}`,
		`{"a":1}{"a":2}`, `"\ud83d\ude00"`, `[]`, `null`, `{"":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := tools.Canonical(in)
		if err != nil {
			return
		}
		again, err := tools.Canonical(got)
		if err != nil || string(again) != string(got) {
			t.Fatalf("Canonical(Canonical(%q)) = %q, %v; want %q", in, again, err, got)
		}
		var a, b any
		if err := json.Unmarshal(in, &a); err != nil {
			t.Fatalf("Canonical accepted %q, which encoding/json refuses: %v", in, err)
		}
		if err := json.Unmarshal(got, &b); err != nil {
			t.Fatalf("Canonical(%q) = %q, which encoding/json refuses: %v", in, got, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("Canonical(%q) = %q reads as %v, the input as %v", in, got, b, a)
		}
	})
}
