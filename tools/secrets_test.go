package tools_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/countersign/countersign/tools"
)

func TestMaskSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"no headers", `{"method":"GET","url":"https://x"}`, `{"method":"GET","url":"https://x"}`},
		{"harmless headers", `{"headers":{"Accept":"text/plain"},"url":"https://x"}`, `{"headers":{"Accept":"text/plain"},"url":"https://x"}`},
		{"bearer", `{"headers":{"Authorization":"Bearer s3cr3t"},"url":"https://x"}`, `{"headers":{"Authorization":"Bearer ••••••"},"url":"https://x"}`},
		{"every kind", `{"headers":{"proxy-authorization":"Basic dXNlcjpwdw==","Cookie":"sid=s3cr3t","Set-Cookie":"a=b","X-Api-Key":"s3cr3t","X-Auth-Token":"s3cr3t","X-Client-Secret":"s3cr3t","Accept":"*/*"}}`,
			`{"headers":{"Accept":"*/*","Cookie":"••••••","Set-Cookie":"••••••","X-Api-Key":"••••••","X-Auth-Token":"••••••","X-Client-Secret":"••••••","proxy-authorization":"Basic ••••••"}}`},
		{"name/value pairs", `{"request":{"Headers":[{"name":"authorization","value":"s3cr3t"},{"name":"accept","value":"x"}]}}`,
			`{"request":{"Headers":[{"name":"authorization","value":"••••••"},{"name":"accept","value":"x"}]}}`},
		{"a body is not headers", `{"body":"Authorization: s3cr3t","headers":{}}`, `{"body":"Authorization: s3cr3t","headers":{}}`},
		{"not JSON", `{"headers":`, `{"headers":`},
		{"a key in the query", `{"method":"GET","url":"https://api.example.com/v1?api_key=sk-123&q=x&Access_Token=t0k#frag"}`,
			`{"method":"GET","url":"https://api.example.com/v1?api_key=••••••&q=x&Access_Token=••••••#frag"}`},
		{"a harmless query", `{"method":"GET","url":"https://api.example.com/v1?q=token&page=2"}`, `{"method":"GET","url":"https://api.example.com/v1?q=token&page=2"}`},
		{"an escaped name", `{"url":"https://x/?api%5Fkey=s3cr3t"}`, `{"url":"https://x/?api%5Fkey=••••••"}`},
		{"a url key written with escapes", `{"\u0075rl":"https://x/?token=s3cr3t"}`, `{"url":"https://x/?token=••••••"}`},
		{"a nested url", `{"request":{"URL":"https://x/?password=hunter2"}}`, `{"request":{"URL":"https://x/?password=••••••"}}`},
		{"a body is not a url", `{"body":"https://x/?token=s3cr3t","url":"https://x/"}`, `{"body":"https://x/?token=s3cr3t","url":"https://x/"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tools.MaskSecrets("http_request", json.RawMessage(tt.in))); got != tt.want {
				t.Errorf("MaskSecrets(%s) = %s, want %s", tt.in, got, tt.want)
			}
			// An audit record's field: the same, the first time and after.
			for range 2 {
				if got := tools.MaskedString("http_request", json.RawMessage(tt.in)); got != tt.want {
					t.Errorf("MaskedString(%s) = %s, want %s", tt.in, got, tt.want)
				}
			}
		})
	}
}

// The arguments passed in are not changed: the checkpoint keeps the
// real values for the tool.
func TestMaskSecretsLeavesItsInputAlone(t *testing.T) {
	t.Parallel()
	in := json.RawMessage(`{"headers":{"Authorization":"Bearer s3cr3t"}}`)
	before := string(in)
	_ = tools.MaskSecrets("http_request", in)
	if string(in) != before {
		t.Errorf("MaskSecrets changed its input to %s", in)
	}
}

// MaskSecrets remembers what recent arguments were masked to; someone
// who sends arguments that differ from masked ones by a byte, or many
// calls at once so that they share its memory's slots, still has each
// call masked as its own arguments say, and a caller that writes over
// what it was given changes nobody else's.
func TestMaskSecretsRemembersNoOtherCallsMask(t *testing.T) {
	t.Parallel()
	type input struct{ args, want string }
	var inputs []input
	for i := range 1000 {
		inputs = append(inputs,
			input{fmt.Sprintf(`{"method":"GET","url":"https://api.example.com/v1?api_key=sk-%d&q=x"}`, i),
				`{"method":"GET","url":"https://api.example.com/v1?api_key=••••••&q=x"}`},
			input{fmt.Sprintf(`{"method":"GET","url":"https://api.example.com/v1?api_kez=sk-%d&q=x"}`, i),
				fmt.Sprintf(`{"method":"GET","url":"https://api.example.com/v1?api_kez=sk-%d&q=x"}`, i)},
			input{fmt.Sprintf(`{"headers":{"Authorization":"Bearer s3cr3t-%d"},"url":"https://x"}`, i),
				`{"headers":{"Authorization":"Bearer ••••••"},"url":"https://x"}`})
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				for i := range inputs {
					in := inputs[(i*7+g*13+round)%len(inputs)]
					if s := tools.MaskedString("http_request", json.RawMessage(in.args)); s != in.want {
						select {
						case errs <- fmt.Sprintf("MaskedString(%s) = %s, want %s", in.args, s, in.want):
						default:
						}
						return
					}
					got := tools.MaskSecrets("http_request", json.RawMessage(in.args))
					if string(got) != in.want {
						select {
						case errs <- fmt.Sprintf("MaskSecrets(%s) = %s, want %s", in.args, got, in.want):
						default:
						}
						return
					}
					for j := range got {
						got[j] = 'x' // the caller's own copy
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func FuzzMaskSecrets(f *testing.F) {
	f.Add(`{"headers":{"Authorization":"Bearer s3cr3t"}}`, "s3cr3t")
	f.Add(`{"headers":{"x-api-key":"k-123"},"url":"https://x"}`, "k-123")
	f.Fuzz(func(t *testing.T, args, secret string) {
		out := tools.MaskSecrets("http_request", json.RawMessage(args))
		if s := tools.MaskedString("http_request", json.RawMessage(args)); s != string(out) {
			t.Errorf("MaskedString(%s) = %s, MaskSecrets: %s", args, s, out)
		}
		if json.Valid([]byte(args)) && !json.Valid(out) {
			t.Errorf("MaskSecrets(%s) = %s, not JSON", args, out)
		}
		// A credential header built from the fuzzed secret never shows.
		if len(strings.TrimSpace(secret)) < 4 || strings.ContainsAny(secret, " ") || strings.Contains(tools.Masked, secret) {
			return
		}
		raw, _ := json.Marshal(map[string]any{"headers": map[string]string{"X-Token": secret}})
		if got := tools.MaskSecrets("http_request", raw); strings.Contains(string(got), mustJSON(secret)) {
			t.Errorf("MaskSecrets(%s) = %s, shows the secret", raw, got)
		}
		// So does a credential in a URL's query.
		escaped := url.QueryEscape(secret)
		raw, _ = json.Marshal(map[string]any{"url": "https://api.example.com/?q=1&api_key=" + escaped + "#f"})
		if got := tools.MaskSecrets("http_request", raw); strings.Contains(string(got), "="+strings.Trim(mustJSON(escaped), `"`)+"#") {
			t.Errorf("MaskSecrets(%s) = %s, shows the secret", raw, got)
		}
	})
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestRedact(t *testing.T) {
	t.Parallel()
	m := tools.Masked
	var s tools.Secrets
	s.Add("Bearer s3cr3t-tok", "abc") // "abc" is too short to look for
	s.AddExpanded("--key=k1", []tools.Span{{6, 8}})
	s.AddURL("redis://:pass@db:6379/0", nil)
	tests := []struct{ name, in, want string }{
		{"nothing secret", "dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused"},
		{"a known value", "401 for s3cr3t-tok", "401 for " + m},
		{"escaped forms", `got "s3cr3t-tok\n" and Bearer+s3cr3t-tok`, `got "` + m + `\n" and ` + m},
		{"a short value is not looked for", "abc", "abc"},
		{"a configured value", "flag --key=k1 unknown", "flag --key=" + m + " unknown"},
		{"a short configured value alone", "k1", "k1"},
		{"a URL's password", `parse "redis://:pass@db:6379/0": bad port`, `parse "redis://:` + m + `@db:6379/0": bad port`},
		{"user information without a password", "https://ghp_token@github.com/x.git", "https://" + m + "@github.com/x.git"},
		{"user and password", "see http://bob:pw@h/ now", "see http://bob:" + m + "@h/ now"},
		{"query values", `Get "http://h/mcp?api_key=xyz&flag&empty=&x=1#frag": EOF`, `Get "http://h/mcp?api_key=` + m + "&" + m + "&empty=&x=" + m + "#" + m + `": EOF`},
		{"several URLs", "https://a/?k=1 and <http://b/?k=2>", "https://a/?k=" + m + " and <http://b/?k=" + m + ">"},
		{"no scheme", "://h/?k=1 or 1://h/?k=1", "://h/?k=1 or 1://h/?k=1"},
		{"adjacent runs are one", "http://h/?s3cr3t-tok", "http://h/?" + m},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Redact(tt.in); got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzRedact: a part of a configured value that came from the
// environment never shows, whatever surrounds it, in the value as shown
// or in an error that quotes it; nor does a secret value, wherever it is.
func FuzzRedact(f *testing.F) {
	f.Add("https://mcp.example.com/mcp?api_key=", "s3cr3t", "&x=1", "dial tcp: refused")
	f.Add("--token=", "t0k", "", "usage: ")
	f.Add("http://", "user:pw", "@h/p", "")
	f.Add("https://h/", "a&b=c#d", "/mcp", "401")
	f.Fuzz(func(t *testing.T, prefix, v, suffix, text string) {
		// The value is a secret that the surroundings do not hold, and
		// that Masked cannot spell (it is UTF-8 and holds no bullet).
		if v == "" || !utf8.ValidString(v) || strings.ContainsRune(v, '•') || strings.Contains(prefix, v) || strings.Contains(suffix, v) {
			return
		}
		value := prefix + v + suffix
		var s tools.Secrets
		s.AddExpanded(value, []tools.Span{{Start: len(prefix), End: len(prefix) + len(v)}})
		if got := s.Redact(value); strings.Contains(got, v) {
			t.Errorf("Redact(%q) = %q, shows %q", value, got, v)
		}
		quoted := `Post "` + value + `": ` + text
		// A configured value is looked for in other texts from
		// MinSecretLen on.
		if len(value) >= tools.MinSecretLen && !strings.Contains(`Post "`+prefix, v) && !strings.Contains(suffix+`": `+text, v) {
			if got := s.Redact(quoted); strings.Contains(got, v) {
				t.Errorf("Redact(%q) = %q, shows %q", quoted, got, v)
			}
		}
		if len(v) >= tools.MinSecretLen {
			var known tools.Secrets
			known.Add(v)
			if got := known.Redact(text + v + prefix); strings.Contains(got, v) {
				t.Errorf("Redact(%q) with %q known = %q, shows it", text+v+prefix, v, got)
			}
		}
	})
}

// FuzzRedactURL: what a URL's password, query values and fragment hold
// makes no difference to what Redact shows of it, alone, quoted in an
// error, or recorded as a configured URL.
func FuzzRedactURL(f *testing.F) {
	f.Add("bob", "hunter2", "mcp.example.com:8443", "/mcp", "api_key", "s3cr3t", "other", "frag")
	f.Add("", "", "h", "", "k", "a b&c=d", "x", "")
	f.Fuzz(func(t *testing.T, user, pass, host, path, key, v1, v2, frag string) {
		build := func(v string) string {
			u := url.URL{Scheme: "https", Host: host, Path: path, RawQuery: url.Values{key: {v}, "x": {v}}.Encode(), Fragment: v}
			if user != "" {
				u.User = url.UserPassword(user, v)
			}
			return u.String()
		}
		if v1 == "" || v2 == "" {
			return // an empty value shows as empty
		}
		a, b := build(v1), build(v2)
		// Only URLs that read back as built: host and path unescaped may
		// hold anything.
		for _, raw := range []string{a, b} {
			u, err := url.Parse(raw)
			if err != nil || u.Host != host || u.Path != path || strings.ContainsAny(host+path, "\"<>` \x7f") || strings.ContainsFunc(host+path, unicode.IsControl) {
				return
			}
		}
		if got, other := new(tools.Secrets).Redact(a), new(tools.Secrets).Redact(b); got != other {
			t.Errorf("Redact(%q) = %q\nRedact(%q) = %q\nwant the same: the secrets differ, not the rest", a, got, b, other)
		}
		if got, other := new(tools.Secrets).Redact(`Get "`+a+`": EOF`), new(tools.Secrets).Redact(`Get "`+b+`": EOF`); got != other {
			t.Errorf("in an error: %q and %q differ", got, other)
		}
		// Recorded as configured, the secrets are also looked for
		// elsewhere, which may hide more: none of them shows.
		var sa tools.Secrets
		sa.AddURL(a, nil)
		got, rest := sa.Redact(a), build("")
		for _, form := range []string{url.QueryEscape(v1), url.PathEscape(v1), url.UserPassword("", v1).String()[1:]} {
			if !strings.Contains(rest, form) && strings.Contains(got, form) {
				t.Errorf("as configured: Redact(%q) = %q, shows %q", a, got, form)
			}
		}
	})
}
