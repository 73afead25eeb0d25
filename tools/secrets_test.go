package tools_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/tools"
)

func TestMaskSecrets(t *testing.T) {
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tools.MaskSecrets("http_request", json.RawMessage(tt.in))); got != tt.want {
				t.Errorf("MaskSecrets(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// The arguments passed in are not changed: the checkpoint keeps the
// real values for the tool.
func TestMaskSecretsLeavesItsInputAlone(t *testing.T) {
	in := json.RawMessage(`{"headers":{"Authorization":"Bearer s3cr3t"}}`)
	before := string(in)
	_ = tools.MaskSecrets("http_request", in)
	if string(in) != before {
		t.Errorf("MaskSecrets changed its input to %s", in)
	}
}

func FuzzMaskSecrets(f *testing.F) {
	f.Add(`{"headers":{"Authorization":"Bearer s3cr3t"}}`, "s3cr3t")
	f.Add(`{"headers":{"x-api-key":"k-123"},"url":"https://x"}`, "k-123")
	f.Fuzz(func(t *testing.T, args, secret string) {
		out := tools.MaskSecrets("http_request", json.RawMessage(args))
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
	})
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
