package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/idna"
)

// HTTPRequestName is the name of the built-in HTTP tool.
const HTTPRequestName = "http_request"

// ToolHeader is set, to the tool's name, on every request the
// http_request tool sends, redirects included, whatever headers the call
// names: the bot's own HTTP endpoints refuse requests that carry it, so
// that no call reaches them — not Slack's endpoints, the OAuth callback,
// /metrics or /readyz, nor the playground, which acts for every person
// it simulates — under any name or address of the bot's.
const ToolHeader = "Countersign-Tool"

// ErrHostNotAllowed is returned by the http_request tool for a URL whose
// host is not in its allow list.
var ErrHostNotAllowed = errors.New("host not allowed")

// Defaults of HTTPOptions.
const (
	DefaultMaxBody     = 4 << 10
	DefaultHTTPTimeout = 30 * time.Second
)

const (
	// maxRedirects is how many redirects one call follows.
	maxRedirects = 5
	// maxDrain is how much of a long body is read, past what the result
	// shows, to count the bytes left out.
	maxDrain = 1 << 20
)

// httpMethods are the methods the tool accepts, as its schema lists them.
var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// HTTPOptions configure the http_request tool. The zero value calls any
// host with a default client.
type HTTPOptions struct {
	// AllowHosts are the only hosts the tool calls, redirects included.
	// Without them the tool calls any host, but follows a redirect only
	// on the same host: a redirect elsewhere is returned to the model
	// (status and Location), which may ask for a new call.
	// An entry "api.example.com" or "127.0.0.1" matches that host on any
	// port; "api.example.com:8080" or "[::1]:8080" only on that port (a
	// URL without a port has its scheme's, 80 or 443). Hosts match by
	// name as written in the URL, case-insensitively; names are not
	// resolved, so "localhost" does not match "127.0.0.1". Entries that
	// cannot be parsed match nothing. Empty means any host.
	AllowHosts []string
	// Client sends the requests; nil means a client with a transport of
	// the tool's own (a copy of http.DefaultTransport's settings), whose
	// connections nothing else in the process shares or closes. The tool
	// uses a copy of the client with its own redirect rules.
	Client *http.Client
	// MaxBody is how many bytes of the response body a result shows
	// (default DefaultMaxBody).
	MaxBody int
	// Timeout bounds one call, reading the body included (default
	// DefaultHTTPTimeout).
	Timeout time.Duration
}

// HTTPRequest is the built-in http_request tool: it sends one HTTP request
// and returns the status, the content type and the start of the body.
// A status such as 404 or 500 is a result, not an error; transport
// failures and hosts not allowed are errors.
type HTTPRequest struct {
	restricted bool          // AllowHosts was set
	allow      []hostPattern // the entries that parsed
	allowText  []string      // AllowHosts as given, for messages
	client     *http.Client
	maxBody    int
	timeout    time.Duration
}

var _ Tool = (*HTTPRequest)(nil)

// NewHTTPRequest returns the http_request tool.
func NewHTTPRequest(o HTTPOptions) *HTTPRequest {
	h := &HTTPRequest{
		restricted: len(o.AllowHosts) > 0,
		allowText:  slices.Clone(o.AllowHosts),
		client:     o.Client,
		maxBody:    o.MaxBody,
		timeout:    o.Timeout,
	}
	for _, s := range o.AllowHosts {
		if p, err := parseHostPattern(s); err == nil {
			h.allow = append(h.allow, p)
		}
	}
	if h.client == nil {
		// Not the shared default transport: whatever else closes its
		// idle connections (an HTTP server of the process shutting
		// down does) would fail a call waiting for one.
		h.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBody
	}
	if h.timeout <= 0 {
		h.timeout = DefaultHTTPTimeout
	}
	return h
}

// Name implements Tool.
func (h *HTTPRequest) Name() string { return HTTPRequestName }

// Description implements Tool.
func (h *HTTPRequest) Description() string {
	d := "Send one HTTP request to an http or https URL. The result is the status line, " +
		"the Content-Type and at most " + strconv.Itoa(h.maxBody) + " bytes of the response body."
	if h.restricted {
		d += " Only these hosts may be called: " + strings.Join(h.allowText, ", ") + "."
	}
	return d
}

// Schema implements Tool: the same bytes at every call, which nobody
// changes.
func (h *HTTPRequest) Schema() json.RawMessage { return httpRequestSchema }

// httpRequestSchema is the schema of the tool's arguments.
var httpRequestSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "method": {"type": "string", "enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"], "description": "HTTP method"},
    "url": {"type": "string", "maxLength": 2048, "description": "absolute http or https URL"},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "request headers"},
    "body": {"type": "string", "description": "request body"}
  },
  "required": ["method", "url"],
  "additionalProperties": false
}`)

// httpArgs are the tool's arguments.
type httpArgs struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}

// Idempotent implements Tool: only GET and HEAD calls are.
func (h *HTTPRequest) Idempotent(args json.RawMessage) bool {
	var a httpArgs
	if err := json.Unmarshal(args, &a); err != nil {
		return false
	}
	m := strings.ToUpper(a.Method)
	return m == http.MethodGet || m == http.MethodHead
}

// Check implements Checker: a call to a host outside allow_hosts, or to a
// URL that does not show what it calls (CheckURL), is refused before
// anyone is asked to approve it.
func (h *HTTPRequest) Check(args json.RawMessage) error {
	var a httpArgs
	if err := json.Unmarshal(args, &a); err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	u, err := CheckURL(a.URL)
	if err != nil {
		return err
	}
	if err := checkHeaders(a.Headers); err != nil {
		return err
	}
	if !h.allowed(u) {
		return fmt.Errorf("host %s is not allowed (allowed: %s): %w", u.Host, strings.Join(h.allowText, ", "), ErrHostNotAllowed)
	}
	return nil
}

// Call implements Tool.
func (h *HTTPRequest) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var a httpArgs
	if err := json.Unmarshal(args, &a); err != nil {
		return "", fmt.Errorf("arguments: %w", err)
	}
	method := strings.ToUpper(a.Method)
	if !slices.Contains(httpMethods, method) {
		return "", fmt.Errorf("method %q: want one of %s", a.Method, strings.Join(httpMethods, ", "))
	}
	u, err := CheckURL(a.URL)
	if err != nil {
		return "", err
	}
	if err := checkHeaders(a.Headers); err != nil {
		return "", err
	}
	if !h.allowed(u) {
		return "", fmt.Errorf("call %s (allowed: %s): %w", u.Host, strings.Join(h.allowText, ", "), ErrHostNotAllowed)
	}

	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var body io.Reader
	if a.Body != "" {
		body = strings.NewReader(a.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return "", err
	}
	// The call's credentials go to the host it names, and no further;
	// what comes back shows none of them (a server may echo a request's
	// headers): the card masked them, and so does the result, which the
	// thread and the model read.
	var creds Secrets
	var credNames []string
	for k, v := range a.Headers {
		req.Header.Set(k, v)
		if IsCredentialName(k) {
			creds.Add(v)
			credNames = append(credNames, http.CanonicalHeaderKey(k))
		}
		if strings.EqualFold(k, "Cookie") {
			// A server may echo each cookie on its own.
			for _, c := range strings.Split(v, ";") {
				if _, value, ok := strings.Cut(c, "="); ok {
					creds.Add(strings.TrimSpace(value))
				}
			}
		}
	}
	slices.Sort(credNames)
	creds.Add(queryCredentials(u)...)
	req.Header.Set(ToolHeader, HTTPRequestName)

	// A copy of the client per call, so that the redirect check can
	// note why it stopped.
	var stopped, credsNote string
	client := *h.client
	client.CheckRedirect = func(next *http.Request, via []*http.Request) error {
		next.Header.Set(ToolHeader, HTTPRequestName)
		switch {
		case len(via) > maxRedirects:
			stopped = fmt.Sprintf("stopped after %d redirects", maxRedirects)
		case next.URL.Scheme != "http" && next.URL.Scheme != "https":
			stopped = fmt.Sprintf("redirect to %s not followed: only http and https URLs are supported", next.URL.Redacted())
		case !h.allowed(next.URL):
			stopped = fmt.Sprintf("redirect to %s not followed: host %s is not allowed", next.URL.Redacted(), next.URL.Host)
		case !h.restricted && !sameHost(u, next.URL):
			// The person who approved the call saw only its URL: a
			// redirect elsewhere is the model's to propose as a new call.
			stopped = fmt.Sprintf("redirect to another host (%s) not followed: to call it, ask for a new http_request to that URL", next.URL.Host)
		case !sameHost(u, next.URL):
			// An allowed host, but not the one the credentials were
			// approved for: net/http keeps every header but
			// Authorization and Cookie on such a redirect.
			dropCredentials(next.Header)
			if len(credNames) > 0 {
				credsNote = fmt.Sprintf("the redirect to %s was sent without the headers %s, which were for %s", next.URL.Host, strings.Join(credNames, ", "), u.Host)
			}
			return nil
		default:
			return nil
		}
		return http.ErrUseLastResponse
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", requestError(u, err)
	}
	defer resp.Body.Close()
	notes := slices.DeleteFunc([]string{credsNote, stopped}, func(s string) bool { return s == "" })
	return h.result(u, resp, notes, creds), nil
}

// dropCredentials deletes the headers whose names look like credentials
// (IsCredentialName).
func dropCredentials(hdr http.Header) {
	for k := range hdr {
		if IsCredentialName(k) {
			hdr.Del(k)
		}
	}
}

// ErrUnclearURL is returned by the http_request tool for a URL that does
// not show plainly what the call reaches, so that a person approving it
// could misread it.
var ErrUnclearURL = errors.New("the URL does not show plainly what it calls")

// CheckURL parses the URL of an http_request call and refuses one that
// the tool cannot call (not http or https, no host), and one that would
// call something other than what a person reads in it:
//   - user information ("https://user:pw@host/", or
//     "https://good.example@evil.example/"): a password would show on the
//     card, and the part before the @ reads like the host. Credentials go
//     in a header, which the card masks;
//   - a host written with %-escapes ("%65vil.example" calls evil.example);
//   - an IPv4 address written other than as four decimal numbers
//     ("2130706433", "0x7f.1", "0177.0.0.1", "127.1", "127.0.0.1."),
//     which the system's resolver, on many systems, dials as 127.0.0.1,
//     and a host that ends in a number but is no address;
//   - an IPv4 address written as IPv6 ("[::ffff:7f00:1]").
//
// Such a URL is an error to the model, which may ask again with the
// address written plainly (the error says how); nobody sees a card.
func CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("url %q: only http and https URLs are supported", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("url %q has no host", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("url %s has user information before its host: send credentials in a header (Authorization: Basic …), which the card masks: %w", u.Redacted(), ErrUnclearURL)
	}
	if written := writtenHost(raw); written != u.Host {
		return nil, fmt.Errorf("the host of url %q is written with %%-escapes: write it as it is called, %s: %w", raw, u.Host, ErrUnclearURL)
	}
	// The request is made from the URL written out again (u.String()):
	// a host that does not come back the same (an IPv6 zone holding a
	// byte that is escaped on the way out) would fail there, after the
	// card, or name another host.
	if again, err := url.Parse(u.String()); err != nil || again.Host != u.Host {
		return nil, fmt.Errorf("the host of url %q is not sent as it is written: %w", raw, ErrUnclearURL)
	}
	host := dialledHost(u.Hostname())
	if strings.Contains(host, ":") {
		if ip, err := netip.ParseAddr(host); err == nil && ip.Is4In6() {
			return nil, fmt.Errorf("the host [%s] is the IPv4 address %s: write it %s: %w", u.Hostname(), ip.Unmap(), ip.Unmap(), ErrUnclearURL)
		}
		return u, nil
	}
	if !endsInNumber(host) {
		return u, nil
	}
	ip, ok := parseIPv4(host)
	switch {
	case !ok:
		return nil, fmt.Errorf("the host %s ends in a number but is not an IPv4 address: %w", u.Hostname(), ErrUnclearURL)
	case ip.String() != u.Hostname():
		return nil, fmt.Errorf("the host %s is the IPv4 address %s written another way: write it %s: %w", u.Hostname(), ip, ip, ErrUnclearURL)
	}
	return u, nil
}

// ErrHeaderNotSent is returned by the http_request tool for a header it
// would not send as the card shows it.
var ErrHeaderNotSent = errors.New("header not sent as written")

// checkHeaders refuses headers that the request would not carry as
// written: a name given twice in different case (one of the two would be
// sent, either), a name or value net/http refuses (a line break), and
// headers net/http sets itself from the URL and the body (Host,
// Content-Length, Transfer-Encoding, Trailer) or the tool sets
// (ToolHeader).
func checkHeaders(headers map[string]string) error {
	seen := make(map[string]string, len(headers))
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		key := http.CanonicalHeaderKey(name)
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			return fmt.Errorf("%q is not an HTTP header name: %w", name, ErrHeaderNotSent)
		case !httpguts.ValidHeaderFieldValue(headers[name]):
			return fmt.Errorf("the value of header %s holds a control character (a line break?): %w", name, ErrHeaderNotSent)
		case seen[key] != "":
			return fmt.Errorf("headers %q and %q are one header (names are not case-sensitive); name it once: %w", seen[key], name, ErrHeaderNotSent)
		case key == "Host" || key == "Content-Length" || key == "Transfer-Encoding" || key == "Trailer":
			return fmt.Errorf("header %s is set from the URL and the body; leave it out: %w", name, ErrHeaderNotSent)
		case key == ToolHeader:
			return fmt.Errorf("header %s is set by the tool; leave it out: %w", name, ErrHeaderNotSent)
		}
		seen[key] = name
	}
	return nil
}

// writtenHost is the host of a URL as written in raw (with its port),
// before url.Parse decodes its %-escapes: from after "//" to the first /,
// ? or #, after the last @.
func writtenHost(raw string) string {
	_, rest, ok := strings.Cut(raw, "//")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	if strings.HasPrefix(rest, "[") {
		// An IPv6 zone is written %25 in a URL: "[fe80::1%25eth0]".
		rest = strings.Replace(rest, "%25", "%", 1)
	}
	return rest
}

// dialledHost is the host name net/http dials for a URL's host: an ASCII
// host as it is, any other in its IDNA (lookup) form, which maps
// look-alikes such as full-width digits and dots to ASCII.
func dialledHost(host string) string {
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf {
			if ascii, err := idna.Lookup.ToASCII(host); err == nil {
				return ascii
			}
			return host
		}
	}
	return host
}

// endsInNumber reports whether a host's last label (a trailing dot
// aside) is a number, decimal or 0x hexadecimal: the WHATWG URL
// standard's test for a host to be read as an IPv4 address.
func endsInNumber(host string) bool {
	labels := strings.Split(host, ".")
	if len(labels) > 1 && labels[len(labels)-1] == "" {
		labels = labels[:len(labels)-1]
	}
	last := labels[len(labels)-1]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	_, ok := ipv4Number(last)
	return ok && (strings.HasPrefix(last, "0x") || strings.HasPrefix(last, "0X"))
}

// parseIPv4 reads an IPv4 address as the WHATWG URL standard (and
// inet_aton) do: one to four numbers, each decimal, octal (a leading 0)
// or hexadecimal (0x), the last filling the bytes left.
func parseIPv4(host string) (netip.Addr, bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := ipv4Number(p)
		if !ok || p == "" {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v = v<<8 | n
			continue
		}
		left := uint(4 - i) // bytes the last number fills
		if n >= 1<<(8*left) {
			return netip.Addr{}, false
		}
		v = v<<(8*left) | n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// ipv4Number reads one number of an IPv4 address: decimal, octal after
// a leading 0, hexadecimal after 0x ("0x" alone is 0).
func ipv4Number(s string) (uint64, bool) {
	base := 10
	switch {
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		s, base = s[2:], 16
		if s == "" {
			return 0, true
		}
	case len(s) > 1 && s[0] == '0':
		s, base = s[1:], 8
	}
	if s == "" || strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
		return 0, false
	}
	n, err := strconv.ParseUint(s, base, 32)
	return n, err == nil
}

// allowed reports whether the tool may call u's host.
func (h *HTTPRequest) allowed(u *url.URL) bool {
	if !h.restricted {
		return true
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port := u.Port()
	if port == "" && u.Scheme == "http" {
		port = "80"
	}
	if port == "" && u.Scheme == "https" {
		port = "443"
	}
	for _, p := range h.allow {
		if p.host == host && (p.port == "" || p.port == port) {
			return true
		}
	}
	return false
}

// sameHost reports whether a redirect to next stays on the host of the
// URL asked for: the same host name and port, or the move from http on
// port 80 to https on port 443.
func sameHost(asked, next *url.URL) bool {
	if !strings.EqualFold(strings.TrimSuffix(asked.Hostname(), "."), strings.TrimSuffix(next.Hostname(), ".")) {
		return false
	}
	from, to := effectivePort(asked), effectivePort(next)
	return from == to || from == "80" && to == "443" && asked.Scheme == "http" && next.Scheme == "https"
}

// effectivePort is u's port, or its scheme's default.
func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// result renders a response for the model:
//
//	HTTP 200 OK
//	Content-Type: application/json
//
//	{"ok":true}
//
// Every value of creds is masked in it, also at the end of a body cut
// short.
func (h *HTTPRequest) result(asked *url.URL, resp *http.Response, notes []string, creds Secrets) string {
	var sb strings.Builder
	status := resp.Status
	if status == "" {
		status = strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
	}
	sb.WriteString("HTTP " + status + "\n")
	for _, k := range []string{"Content-Type", "Location", "Retry-After"} {
		if v := resp.Header.Get(k); v != "" {
			sb.WriteString(k + ": " + v + "\n")
		}
	}
	if final := resp.Request.URL; final.String() != asked.String() {
		sb.WriteString("Redirected to: " + final.Redacted() + "\n")
	}
	for _, n := range notes {
		sb.WriteString("Note: " + n + "\n")
	}
	sb.WriteString("\n")
	return creds.RedactValues(sb.String()) + h.body(resp, creds)
}

// body reads the response body and returns at most maxBody bytes of it as
// text, cut at a character boundary, with a note of what was left out;
// the values of creds are masked in it.
func (h *HTTPRequest) body(resp *http.Response, creds Secrets) string {
	head, err := io.ReadAll(io.LimitReader(resp.Body, int64(h.maxBody)+utf8.UTFMax))
	if err != nil {
		return fmt.Sprintf("[body not read: %v]", err)
	}
	// Read on past what is shown, up to a limit, to count what is cut.
	rest, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain+1))
	total := int64(len(head)) + rest
	count := func(n int64) string {
		if err != nil || rest > maxDrain {
			return fmt.Sprintf("at least %d", n)
		}
		return strconv.FormatInt(n, 10)
	}

	var text string
	switch {
	case total == 0:
		text = "(empty body)"
	case isBinary(resp.Header.Get("Content-Type"), head):
		text = fmt.Sprintf("[binary body of %s bytes not shown]", count(total))
	default:
		shown := cutText(string(head), h.maxBody)
		text = creds.RedactValues(strings.ToValidUTF8(shown, "\uFFFD"))
		if left := total - int64(len(shown)); left > 0 {
			text = hideCutSecret(text, creds) + moreBytes(count(left))
		}
	}
	if err != nil {
		text += fmt.Sprintf("\n[body not read to the end: %v]", err)
	}
	return text
}

// hideCutSecret masks the end of a text cut short when it is the start of
// a secret value (at least MinSecretLen bytes of it), which RedactValues
// cannot recognise.
func hideCutSecret(text string, s Secrets) string {
	for _, v := range s.values {
		for _, form := range secretForms(v) {
			for k := len(form) - 1; k >= MinSecretLen; k-- {
				if strings.HasSuffix(text, form[:k]) {
					return text[:len(text)-k] + Masked
				}
			}
		}
	}
	return text
}

// CapText bounds a tool's result as the http_request tool bounds a body:
// at most max bytes of text, cut at a character boundary, then a note of
// how many bytes were left out. Text within max is returned as it is.
func CapText(text string, max int) string {
	if len(text) <= max {
		return text
	}
	shown := cutText(text, max)
	return shown + moreBytes(strconv.Itoa(len(text)-len(shown)))
}

// cutText returns at most max bytes of s, not splitting a character.
func cutText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// moreBytes is the note that ends a result cut short.
func moreBytes(count string) string {
	return fmt.Sprintf("\n[… %s more bytes not shown]", count)
}

// isBinary reports a body that is not text.
func isBinary(contentType string, head []byte) bool {
	for _, prefix := range []string{"image/", "audio/", "video/", "application/octet-stream", "application/pdf", "application/zip"} {
		if strings.HasPrefix(strings.ToLower(contentType), prefix) {
			return true
		}
	}
	return bytes.IndexByte(head, 0) >= 0
}

// hostPattern is one allow_hosts entry: a host name or IP address, and
// a port if the entry names one.
type hostPattern struct {
	host string // lower case, no brackets, no trailing dot
	port string // empty: any port
}

// parseHostPattern reads "host", "host:port", an IPv6 address, or
// "[ipv6]:port".
func parseHostPattern(s string) (hostPattern, error) {
	bad := func() (hostPattern, error) {
		return hostPattern{}, fmt.Errorf("%q is not a host or host:port", s)
	}
	if s == "" || strings.ContainsAny(s, "/@?# \t") {
		return bad()
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			inner, ok := strings.CutSuffix(s[1:], "]")
			if !ok {
				return bad()
			}
			h, p = inner, ""
		}
		host, port = h, p
	case strings.Count(s, ":") == 1:
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			return bad()
		}
		host, port = h, p
	case strings.Contains(s, ":") && net.ParseIP(s) == nil:
		return bad() // several colons: only an IPv6 address may have them
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return bad()
		}
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return bad()
	}
	return hostPattern{host: host, port: port}, nil
}

// requestError says in words why a request got no answer, instead of Go's
// `Post "https://…": dial tcp 10.0.0.1:443: connect: connection refused`.
func requestError(u *url.URL, err error) error {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s did not answer in time", u.Host)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("the host %s was not found", u.Hostname())
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s refused the connection (nothing listens there)", u.Host)
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return fmt.Errorf("could not connect to %s (%v)", u.Host, opErr.Err)
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return fmt.Errorf("%s %s: %w", uerr.Op, u.Host, uerr.Err)
	}
	return err
}
