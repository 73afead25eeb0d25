package tools

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
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
// {"name": …, "value": …} pairs in a list under it. So is the value of
// every query parameter whose name looks like a credential (api_key,
// access_token, …) in a URL under a "url" key, at any depth
// ("https://api.example.com/v1?api_key=••••••&q=x"); the rest of the URL
// is shown as it is. Arguments with nothing to mask, and arguments that
// are not JSON, are returned as they are; masked ones are re-encoded with
// their keys sorted.
//
// Cards, the audit stream, logs and the checkpoint inspector show
// arguments only through this function; the checkpoint keeps the real
// values, which the tool needs to run. tool is the tool's name, for rules
// of a particular tool; every tool is treated alike today.
func MaskSecrets(tool string, args json.RawMessage) json.RawMessage {
	m := maskedArgs(tool, args)
	if !m.changed {
		return args
	}
	return json.RawMessage(m.out) // a copy of its own for the caller
}

// MaskedString is string(MaskSecrets(tool, args)): for an audit record's
// field, which holds the same call's masked arguments in each record of
// it. What small arguments were masked to is the string made the first
// time, not a new copy each time.
func MaskedString(tool string, args json.RawMessage) string {
	return maskedArgs(tool, args).out
}

// maskedArgs is what args are masked to. A call's arguments are masked for
// each audit record of it (three in an approval cycle: decision,
// execution, outcome) and for its card: what small arguments were
// masked to is remembered, as ArgsHash's hashes are, keyed by the tool
// and the whole arguments.
func maskedArgs(tool string, args json.RawMessage) maskResult {
	var buf [maxRememberedInput]byte
	in, short := key(&buf, tool, args)
	if short {
		if m, ok := recentMasks.get(in); ok {
			return m
		}
	}
	out := maskSecrets(args)
	m := maskResult{out: string(out), changed: !bytes.Equal(out, args)}
	if short {
		recentMasks.put(in, m)
	}
	return m
}

// maskResult is what MaskSecrets made of its input: whether masking changed
// the arguments, and what to (the arguments themselves if it did not).
type maskResult struct {
	out     string
	changed bool
}

// recentMasks are what MaskSecrets returned last.
var recentMasks = newRecent[maskResult](64)

// maskSecrets is MaskSecrets, computed.
func maskSecrets(args json.RawMessage) json.RawMessage {
	if lower := bytes.ToLower(args); !bytes.Contains(lower, []byte("headers")) && !bytes.Contains(lower, []byte("url")) && !bytes.Contains(args, []byte(`\u`)) {
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
			if s, ok := val.(string); ok && strings.EqualFold(k, "url") {
				if m, ok := maskQuery(s); ok {
					x[k], changed = m, true
				}
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

// maskQuery masks the values of the query parameters of URL u whose
// names look like credentials, and reports whether there were any. The
// rest of u is kept byte for byte.
func maskQuery(u string) (string, bool) {
	q := strings.IndexByte(u, '?')
	if q < 0 {
		return u, false
	}
	end := len(u)
	if f := strings.IndexByte(u[q:], '#'); f >= 0 {
		end = q + f
	}
	params := strings.Split(u[q+1:end], "&")
	changed := false
	for i, p := range params {
		name, value, ok := strings.Cut(p, "=")
		if !ok || value == "" {
			continue
		}
		if n, err := url.QueryUnescape(name); err == nil && IsCredentialName(n) {
			params[i], changed = name+"="+Masked, true
		}
	}
	if !changed {
		return u, false
	}
	return u[:q+1] + strings.Join(params, "&") + u[end:], true
}

// queryCredentials are the values of the query parameters of u whose
// names look like credentials, as MaskSecrets masks them.
func queryCredentials(u *url.URL) []string {
	var out []string
	for name, values := range u.Query() {
		if IsCredentialName(name) {
			out = append(out, values...)
		}
	}
	return out
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

// MinSecretLen is the length from which a secret value is looked for
// anywhere in a text (Secrets.Redact). A shorter value is hidden only
// where it is known to be: in the configured value it came into.
const MinSecretLen = 4

// Span is the bytes [Start, End) of a configured value.
type Span struct{ Start, End int }

// Secrets are what is secret in a configuration, to hide it wherever the
// configuration, or an error or a log line about it, is shown: values
// known to be secret (those of a server's env: and headers:, those its
// ${VAR} references were replaced with), and configured values with the
// parts of them that came from the environment. The zero value knows no
// secret; Redact still hides what URLs hold. Add to it while the
// configuration is read; after that it is safe for concurrent use.
type Secrets struct {
	values []string          // secret values, looked for anywhere
	parts  map[string][]Span // configured value → its parts from the environment
}

// Add records values as secret, with the part after an authorization
// scheme ("Bearer …") as one more. Values shorter than MinSecretLen are
// left out: looked for anywhere, they would hide half of every text.
func (s *Secrets) Add(values ...string) {
	for _, v := range values {
		if scheme, rest, ok := strings.Cut(strings.TrimSpace(v), " "); ok && isToken(scheme) {
			s.add(strings.TrimSpace(rest))
		}
		s.add(v)
	}
}

func (s *Secrets) add(v string) {
	if len(v) >= MinSecretLen && !slices.Contains(s.values, v) {
		s.values = append(s.values, v)
	}
}

// AddExpanded records a configured value after ${VAR} expansion, with
// the parts of it that came from the environment: those are hidden
// wherever value is shown, whatever their length, and looked for
// anywhere else as secret values (Add).
func (s *Secrets) AddExpanded(value string, fromEnv []Span) {
	var spans []Span
	for _, sp := range fromEnv {
		if sp.Start < 0 || sp.End > len(value) || sp.Start >= sp.End {
			continue
		}
		spans = append(spans, sp)
		s.add(value[sp.Start:sp.End])
	}
	if len(spans) == 0 {
		return
	}
	if s.parts == nil {
		s.parts = map[string][]Span{}
	}
	s.parts[value] = append(s.parts[value], spans...)
}

// Redact returns text for people and logs to see, each run of hidden
// bytes shown as Masked. It hides:
//   - in each occurrence of a configured value (AddExpanded), the parts
//     that came from the environment (a value shorter than MinSecretLen
//     only when it is all of text: what a configured value is shown as);
//   - every occurrence of a secret value, as it is, URL-escaped or
//     quoted as Go quotes strings (%q);
//   - in every URL in text (scheme://…, up to a space, a control
//     character, ", <, > or `), the password of its user information (all
//     of it when it has no password: a token may be the user name), the
//     value of every query parameter (every parameter without "=") and
//     the fragment.
//
// It is the one function that shows configuration and errors about it:
// a server's URL and command, its Status.Err, the log lines about it,
// and the errors of its calls, which reach cards, the model and the
// audit trail.
func (s Secrets) Redact(text string) string {
	return masked(text, append(s.valueSpans(text), urlSecrets(text)...))
}

// RedactValues is Redact without its rule for URLs: it hides the secret
// values and the configured values' parts from the environment, and
// leaves every other part of a URL as it is.
func (s Secrets) RedactValues(text string) string {
	return masked(text, s.valueSpans(text))
}

// valueSpans are the spans of text that Redact hides for the values
// known to be secret.
func (s Secrets) valueSpans(text string) []Span {
	var hide []Span
	for v, spans := range s.parts {
		found := occurrences(text, v)
		if len(v) < MinSecretLen && text != v {
			found = nil // hidden only where it is known to be
		}
		for _, at := range found {
			for _, sp := range spans {
				hide = append(hide, Span{at + sp.Start, at + sp.End})
			}
		}
	}
	for _, v := range s.values {
		for _, form := range secretForms(v) {
			for _, at := range occurrences(text, form) {
				hide = append(hide, Span{at, at + len(form)})
			}
		}
	}
	return hide
}

// secretForms are the ways a value may be written in a text.
func secretForms(v string) []string {
	forms := []string{v}
	q := strconv.Quote(v)
	for _, f := range []string{url.QueryEscape(v), url.PathEscape(v), q[1 : len(q)-1]} {
		if !slices.Contains(forms, f) {
			forms = append(forms, f)
		}
	}
	return forms
}

// occurrences are the offsets of every occurrence of v in text,
// overlapping ones included.
func occurrences(text, v string) []int {
	if v == "" {
		return nil
	}
	var out []int
	for from := 0; ; {
		i := strings.Index(text[from:], v)
		if i < 0 {
			return out
		}
		out = append(out, from+i)
		from += i + 1
	}
}

// AddURL records a configured URL (AddExpanded): wherever it is shown,
// the parts that came from the environment are hidden, and so are its
// user information's password, its query values and its fragment, as
// Redact hides them in any URL; these are also looked for anywhere else
// as secret values. Unlike in running text, all of raw is the URL, a
// space or a quote included.
func (s *Secrets) AddURL(raw string, fromEnv []Span) {
	if at := strings.Index(raw, "://"); at >= 0 && hasScheme(raw[:at]) {
		fromEnv = append(slices.Clone(fromEnv), urlParts(raw[at+len("://"):], at+len("://"))...)
	}
	s.AddExpanded(raw, fromEnv)
}

// urlSecrets finds the URLs in text and returns the spans of their
// secrets (urlParts).
func urlSecrets(text string) []Span {
	var hide []Span
	end := 0 // of the last URL
	for _, at := range occurrences(text, "://") {
		if at < end || !hasScheme(text[:at]) {
			continue
		}
		start := at + len("://")
		end = start
		for end < len(text) && !endsURL(text[end]) {
			end++
		}
		hide = append(hide, urlParts(text[start:end], start)...)
	}
	return hide
}

// urlParts returns the spans, offset by off, of the secrets of a URL
// from after its "://": the user information's password (or all of it,
// without a password), query values and fragment.
func urlParts(u string, off int) []Span {
	var hide []Span
	// The authority runs to the first /, ? or #; its user information to
	// its last @.
	auth := len(u)
	if i := strings.IndexAny(u, "/?#"); i >= 0 {
		auth = i
	}
	if at := strings.LastIndexByte(u[:auth], '@'); at > 0 {
		if colon := strings.IndexByte(u[:at], ':'); colon >= 0 {
			hide = append(hide, Span{off + colon + 1, off + at})
		} else {
			hide = append(hide, Span{off, off + at})
		}
	}
	rest := u[auth:]
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		hide = append(hide, Span{off + auth + i + 1, off + len(u)})
		rest = rest[:i]
	}
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		return hide
	}
	from := off + auth + q + 1
	for _, param := range strings.Split(rest[q+1:], "&") {
		if eq := strings.IndexByte(param, '='); eq >= 0 {
			hide = append(hide, Span{from + eq + 1, from + len(param)})
		} else {
			hide = append(hide, Span{from, from + len(param)})
		}
		from += len(param) + 1
	}
	return hide
}

// hasScheme reports whether before ends with a URL scheme.
func hasScheme(before string) bool {
	i := len(before)
	for i > 0 {
		c := before[i-1]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			break
		}
		i--
	}
	if i == len(before) {
		return false
	}
	c := before[i]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// endsURL reports whether c ends a URL in running text: no URL holds it
// unescaped (RFC 3986), and Go's %q and most texts quote with ".
func endsURL(c byte) bool {
	return c <= ' ' || c == 0x7f || c == '"' || c == '<' || c == '>' || c == '`'
}

// masked is text with each run of the hidden spans replaced with Masked.
func masked(text string, hide []Span) string {
	slices.SortFunc(hide, func(a, b Span) int { return a.Start - b.Start })
	var runs []Span
	for _, sp := range hide {
		switch n := len(runs); {
		case sp.Start >= sp.End:
		case n > 0 && sp.Start <= runs[n-1].End:
			runs[n-1].End = max(runs[n-1].End, sp.End)
		default:
			runs = append(runs, sp)
		}
	}
	if len(runs) == 0 {
		return text
	}
	var b strings.Builder
	at := 0
	for _, r := range runs {
		b.WriteString(text[at:r.Start])
		b.WriteString(Masked)
		at = r.End
	}
	b.WriteString(text[at:])
	return b.String()
}

// RedactError returns err with its text shown through Redact; errors.Is
// and errors.As still find what err wraps. It returns nil for nil.
func (s Secrets) RedactError(err error) error {
	if err == nil {
		return nil
	}
	return redactedError{err: err, secrets: s}
}

type redactedError struct {
	err     error
	secrets Secrets
}

func (e redactedError) Error() string { return e.secrets.Redact(e.err.Error()) }
func (e redactedError) Unwrap() error { return e.err }
