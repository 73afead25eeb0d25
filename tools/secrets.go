package tools

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Masked is what a masked secret shows instead of its value.
const Masked = "••••••"

// MaskSecrets returns a tool call's arguments for people and records to
// see: every header value whose name looks like a credential
// (Authorization, Proxy-Authorization, Cookie, Set-Cookie, *-Key,
// *-Token, *secret*, *password*, case-insensitively) is replaced with
// Masked, keeping an authorization scheme such as "Bearer". Headers are
// the values of any object under a "headers" key, at any depth, and
// {"name": …, "value": …} pairs in a list under it. Arguments with
// nothing to mask, and arguments that are not JSON, are returned as they
// are; masked ones are re-encoded with their keys sorted.
//
// Cards, the audit stream, logs and the checkpoint inspector show
// arguments only through this function; the checkpoint keeps the real
// values, which the tool needs to run. tool is the tool's name, for rules
// of a particular tool; every tool is treated alike today.
func MaskSecrets(tool string, args json.RawMessage) json.RawMessage {
	if !bytes.Contains(bytes.ToLower(args), []byte("headers")) {
		return args
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return args
	}
	masked, changed := maskIn(v, false)
	if !changed {
		return args
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(masked) != nil {
		return args
	}
	return json.RawMessage(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// MaskSecretsText is MaskSecrets for arguments held as a string, as a
// model's tool call holds them.
func MaskSecretsText(tool, args string) string {
	return string(MaskSecrets(tool, json.RawMessage(args)))
}

// maskIn masks the credential values in v; headers says v is (or is in) a
// headers object.
func maskIn(v any, headers bool) (any, bool) {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		if headers {
			if name, ok := x["name"].(string); ok && IsCredentialName(name) {
				if val, ok := x["value"].(string); ok {
					x["value"], changed = maskValue(val), true
				}
			}
		}
		for k, val := range x {
			if s, ok := val.(string); ok && headers && IsCredentialName(k) {
				x[k], changed = maskValue(s), true
				continue
			}
			m, c := maskIn(val, headers || strings.EqualFold(k, "headers"))
			x[k], changed = m, changed || c
		}
	case []any:
		for i, val := range x {
			m, c := maskIn(val, headers)
			x[i], changed = m, changed || c
		}
	}
	return v, changed
}

// IsCredentialName reports whether a header name looks like it carries a
// credential.
func IsCredentialName(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	switch n {
	case "authorization", "proxy-authorization", "cookie", "set-cookie", "key", "token", "apikey":
		return true
	}
	for _, suffix := range []string{"-key", "_key", "-token", "_token", "apikey"} {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	return strings.Contains(n, "secret") || strings.Contains(n, "password")
}

// maskValue hides a credential, keeping the scheme of an Authorization
// value ("Bearer ••••••").
func maskValue(s string) string {
	if scheme, rest, ok := strings.Cut(strings.TrimSpace(s), " "); ok && rest != "" && len(scheme) <= 16 && isToken(scheme) {
		return scheme + " " + Masked
	}
	return Masked
}

func isToken(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return s != ""
}
