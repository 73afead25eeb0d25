package slacksig_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/slacksig"
)

// Slack's documented example of request signing.
const (
	exampleSecret    = "8f742231b10e8888abcd99yyyzzz85a5"
	exampleTimestamp = "1531420618"
	exampleBody      = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	exampleSignature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
)

var exampleTime = time.Unix(1531420618, 0)

// clock returns a fixed clock.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// sign computes a v0 signature independently of the code under test.
func signV0(secret, ts string, body []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte("v0:" + ts + ":"))
	h.Write(body)
	return "v0=" + hex.EncodeToString(h.Sum(nil))
}

func signatureHeader(ts, sig string) http.Header {
	h := http.Header{}
	if ts != "" {
		h.Set("X-Slack-Request-Timestamp", ts)
	}
	if sig != "" {
		h.Set("X-Slack-Signature", sig)
	}
	return h
}

func TestVerifySlackExample(t *testing.T) {
	if got := signV0(exampleSecret, exampleTimestamp, []byte(exampleBody)); got != exampleSignature {
		t.Fatalf("test helper sign = %s, want %s", got, exampleSignature)
	}
	v := slacksig.NewVerifier(exampleSecret, fixedClock(exampleTime))
	if err := v.Verify(signatureHeader(exampleTimestamp, exampleSignature), []byte(exampleBody)); err != nil {
		t.Fatalf("Verify(Slack's example) = %v, want nil", err)
	}
}

func TestVerify(t *testing.T) {
	body := []byte(exampleBody)
	at := func(d time.Duration) string { return strconv.FormatInt(exampleTime.Add(d).Unix(), 10) }
	tests := []struct {
		name    string
		secret  string
		ts, sig string
		body    []byte
		want    error
	}{
		{name: "valid", ts: exampleTimestamp, sig: exampleSignature, body: body},
		{name: "5 minutes old", ts: at(-5 * time.Minute), sig: signV0(exampleSecret, at(-5*time.Minute), body), body: body},
		{name: "5 minutes 1 second old", ts: at(-5*time.Minute - time.Second), sig: signV0(exampleSecret, at(-5*time.Minute-time.Second), body), body: body, want: slacksig.ErrStaleRequest},
		{name: "5 minutes ahead", ts: at(5 * time.Minute), sig: signV0(exampleSecret, at(5*time.Minute), body), body: body},
		{name: "5 minutes 1 second ahead", ts: at(5*time.Minute + time.Second), sig: signV0(exampleSecret, at(5*time.Minute+time.Second), body), body: body, want: slacksig.ErrStaleRequest},
		{name: "a day old", ts: at(-24 * time.Hour), sig: signV0(exampleSecret, at(-24*time.Hour), body), body: body, want: slacksig.ErrStaleRequest},
		{name: "absurd timestamp", ts: "-9223372036854775808", sig: signV0(exampleSecret, "-9223372036854775808", body), body: body, want: slacksig.ErrStaleRequest},
		{name: "wrong signature", ts: exampleTimestamp, sig: "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b504", body: body, want: slacksig.ErrBadSignature},
		{name: "other secret", ts: exampleTimestamp, sig: signV0("another secret", exampleTimestamp, body), body: body, want: slacksig.ErrBadSignature},
		{name: "body changed", ts: exampleTimestamp, sig: exampleSignature, body: append(body[:len(body):len(body)], '&'), want: slacksig.ErrBadSignature},
		{name: "timestamp changed", ts: at(time.Second), sig: exampleSignature, body: body, want: slacksig.ErrBadSignature},
		{name: "other scheme", ts: exampleTimestamp, sig: "v1=" + strings.TrimPrefix(exampleSignature, "v0="), body: body, want: slacksig.ErrBadSignature},
		{name: "no scheme", ts: exampleTimestamp, sig: strings.TrimPrefix(exampleSignature, "v0="), body: body, want: slacksig.ErrBadSignature},
		{name: "not hex", ts: exampleTimestamp, sig: "v0=zz", body: body, want: slacksig.ErrBadSignature},
		{name: "the right MAC in capitals", ts: exampleTimestamp, sig: "v0=" + strings.ToUpper(strings.TrimPrefix(exampleSignature, "v0=")), body: body, want: slacksig.ErrBadSignature},
		{name: "truncated signature", ts: exampleTimestamp, sig: exampleSignature[:20], body: body, want: slacksig.ErrBadSignature},
		{name: "timestamp not a number", ts: "yesterday", sig: exampleSignature, body: body, want: slacksig.ErrBadSignature},
		{name: "missing signature", ts: exampleTimestamp, body: body, want: slacksig.ErrMissingSignature},
		{name: "missing timestamp", sig: exampleSignature, body: body, want: slacksig.ErrMissingSignature},
		{name: "missing both", body: body, want: slacksig.ErrMissingSignature},
		{name: "no secret configured", secret: "-", ts: exampleTimestamp, sig: signV0("", exampleTimestamp, body), body: body, want: slacksig.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret := exampleSecret
			if tt.secret == "-" {
				secret = ""
			}
			v := slacksig.NewVerifier(secret, fixedClock(exampleTime))
			err := v.Verify(signatureHeader(tt.ts, tt.sig), tt.body)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Verify() = %v, want %v", err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), secret) && secret != "" || tt.sig != "" && strings.Contains(err.Error(), tt.sig)) {
				t.Errorf("Verify() error %q reveals the secret or the signature", err)
			}
		})
	}
}

func TestVerifyDefaultClock(t *testing.T) {
	v := slacksig.NewVerifier(exampleSecret, nil)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	if err := v.Verify(signatureHeader(now, signV0(exampleSecret, now, nil)), nil); err != nil {
		t.Fatalf("Verify(signed now) = %v, want nil", err)
	}
	if err := v.Verify(signatureHeader(exampleTimestamp, exampleSignature), []byte(exampleBody)); !errors.Is(err, slacksig.ErrStaleRequest) {
		t.Fatalf("Verify(2018 example) = %v, want %v", err, slacksig.ErrStaleRequest)
	}
}

func TestVerifyMiddleware(t *testing.T) {
	large := bytes.Repeat([]byte("a"), slacksig.MaxBody+1)
	exact := bytes.Repeat([]byte("a"), slacksig.MaxBody)
	tests := []struct {
		name     string
		ts, sig  string
		body     []byte
		want     int
		wantNext bool
	}{
		{name: "valid", ts: exampleTimestamp, sig: exampleSignature, body: []byte(exampleBody), want: http.StatusOK, wantNext: true},
		{name: "exactly 1 MiB", ts: exampleTimestamp, sig: signV0(exampleSecret, exampleTimestamp, exact), body: exact, want: http.StatusOK, wantNext: true},
		{name: "empty body", ts: exampleTimestamp, sig: signV0(exampleSecret, exampleTimestamp, nil), want: http.StatusOK, wantNext: true},
		{name: "over 1 MiB", ts: exampleTimestamp, sig: signV0(exampleSecret, exampleTimestamp, large), body: large, want: http.StatusRequestEntityTooLarge},
		{name: "over 1 MiB unsigned", body: large, want: http.StatusUnauthorized},
		{name: "wrong signature", ts: exampleTimestamp, sig: signV0("another secret", exampleTimestamp, []byte(exampleBody)), body: []byte(exampleBody), want: http.StatusUnauthorized},
		{name: "missing signature", ts: exampleTimestamp, body: []byte(exampleBody), want: http.StatusUnauthorized},
		{name: "stale", ts: "1531420000", sig: signV0(exampleSecret, "1531420000", []byte(exampleBody)), body: []byte(exampleBody), want: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var called bool
			var gotBody []byte
			var gotForm string
			h := slacksig.NewVerifier(exampleSecret, fixedClock(exampleTime)).Middleware(func(w http.ResponseWriter, r *http.Request, body []byte) {
				called, gotBody = true, body
				if err := r.ParseForm(); err == nil {
					gotForm = r.PostForm.Get("user_name")
				}
			})
			req := httptest.NewRequest(http.MethodPost, "/slack/commands", bytes.NewReader(tt.body))
			req.Header = signatureHeader(tt.ts, tt.sig)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status = %d, want %d", rec.Code, tt.want)
			}
			if called != tt.wantNext {
				t.Fatalf("next called = %v, want %v", called, tt.wantNext)
			}
			if called && !bytes.Equal(gotBody, tt.body) {
				t.Errorf("next got a body of %d bytes, want %d", len(gotBody), len(tt.body))
			}
			if tt.name == "valid" && gotForm != "roadrunner" {
				t.Errorf("next's r.PostForm user_name = %q, want %q", gotForm, "roadrunner")
			}
			if bytes.Contains(rec.Body.Bytes(), []byte("token=")) || tt.sig != "" && strings.Contains(rec.Body.String(), tt.sig) {
				t.Errorf("response %q echoes the request", rec.Body)
			}
		})
	}
}

// A request without valid signature headers is refused before its body
// is read: the body here blocks forever if anyone reads it.
func TestVerifyMiddlewareRefusesBeforeReading(t *testing.T) {
	tests := []struct {
		name    string
		ts, sig string
	}{
		{"no headers", "", ""},
		{"no signature", exampleTimestamp, ""},
		{"no timestamp", "", exampleSignature},
		{"stale", "1531420000", exampleSignature},
		{"timestamp not a number", "yesterday", exampleSignature},
		{"not v0", exampleTimestamp, "v1=00"},
		{"not hex", exampleTimestamp, "v0=zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := slacksig.NewVerifier(exampleSecret, fixedClock(exampleTime)).Middleware(func(w http.ResponseWriter, r *http.Request, body []byte) {
				t.Error("next was called")
			})
			body := blockingReader{t: t}
			req := httptest.NewRequest(http.MethodPost, "/slack/commands", body)
			req.Header = signatureHeader(tt.ts, tt.sig)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusUnauthorized {
				t.Errorf("status = %d, want %d", rec.Code, http.StatusUnauthorized)
			}
		})
	}
}

// blockingReader is a request body that must not be read.
type blockingReader struct{ t *testing.T }

func (b blockingReader) Read([]byte) (int, error) {
	b.t.Error("the body was read")
	return 0, errors.New("not readable")
}

func TestReadBody(t *testing.T) {
	tests := []struct {
		name string
		size int
		want error
	}{
		{name: "empty", size: 0},
		{name: "small", size: 10},
		{name: "at the limit", size: slacksig.MaxBody},
		{name: "one byte over", size: slacksig.MaxBody + 1, want: slacksig.ErrTooLarge},
		{name: "far over", size: 8 * slacksig.MaxBody, want: slacksig.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(make([]byte, tt.size)))
			body, err := slacksig.ReadBody(httptest.NewRecorder(), req)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("ReadBody(%d bytes) error = %v, want %v", tt.size, err, tt.want)
			}
			if err == nil && len(body) != tt.size {
				t.Fatalf("ReadBody(%d bytes) read %d bytes", tt.size, len(body))
			}
		})
	}
}
