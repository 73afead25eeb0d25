// Package slacksig checks that HTTP requests come from Slack, with
// Slack's v0 request signing, and reads their bodies within a size
// limit. The handlers put it in front of every Slack endpoint.
package slacksig

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Errors of request verification and reading. Every verification error
// matches exactly one of ErrMissingSignature, ErrBadSignature and
// ErrStaleRequest with errors.Is.
var (
	// ErrMissingSignature: the request has no X-Slack-Signature or no
	// X-Slack-Request-Timestamp header.
	ErrMissingSignature = errors.New("missing Slack signature")
	// ErrBadSignature: the signature is malformed or does not match the
	// body, or no signing secret is configured.
	ErrBadSignature = errors.New("bad Slack signature")
	// ErrStaleRequest: the request's timestamp is more than MaxClockSkew
	// away from now, so it may be a replay.
	ErrStaleRequest = errors.New("stale Slack request")
	// ErrTooLarge: the request body is over MaxBody bytes.
	ErrTooLarge = errors.New("request body too large")
)

const (
	// MaxBody is the largest request body the handlers read (1 MiB).
	MaxBody = 1 << 20
	// MaxClockSkew is how far a request's timestamp may be from now, in
	// either direction, for the request to be accepted.
	MaxClockSkew = 5 * time.Minute
)

// The headers of Slack's request signing, version v0.
const (
	headerTimestamp = "X-Slack-Request-Timestamp"
	headerSignature = "X-Slack-Signature"
	signatureScheme = "v0"
)

// Verifier checks that requests come from Slack, with Slack's v0 request
// signing: the signature is the hex HMAC-SHA256, keyed with the app's
// signing secret, of "v0:<timestamp>:<body>".
//
// The package uses its own verifier rather than slack-go's
// SecretsVerifier so that the clock can be injected.
type Verifier struct {
	secret []byte
	now    func() time.Time
}

// NewVerifier returns a verifier for the app's signing secret. now is the
// clock; nil means time.Now. A verifier with an empty secret rejects every
// request: an HMAC with an empty key is one anybody can compute.
func NewVerifier(signingSecret string, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{secret: []byte(signingSecret), now: now}
}

// Verify checks the signature headers of a request against its raw body.
// The error matches ErrMissingSignature, ErrBadSignature or
// ErrStaleRequest; it never contains the signature, the body or the
// secret.
func (v *Verifier) Verify(header http.Header, body []byte) error {
	ts, sig, err := v.CheckHeader(header)
	if err != nil {
		return err
	}
	if !hmac.Equal(sig, v.mac(ts, body)) {
		return ErrBadSignature
	}
	return nil
}

// CheckHeader checks what can be checked of a request's signature before
// its body is read: both headers are present, the timestamp is a number
// within MaxClockSkew of now, and the signature is of scheme v0 in
// lowercase hex, as Slack writes it.
// It returns the timestamp and the raw signature for Verify. The errors
// are those of Verify.
func (v *Verifier) CheckHeader(header http.Header) (ts string, sig []byte, err error) {
	ts = header.Get(headerTimestamp)
	rawSig := header.Get(headerSignature)
	if ts == "" || rawSig == "" {
		return "", nil, ErrMissingSignature
	}
	if len(v.secret) == 0 {
		return "", nil, fmt.Errorf("no signing secret configured: %w", ErrBadSignature)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", nil, fmt.Errorf("timestamp is not a number: %w", ErrBadSignature)
	}
	// Compare in seconds: converting an absurd timestamp to a
	// time.Duration could overflow.
	if skew := v.now().Unix() - unix; skew > int64(MaxClockSkew/time.Second) || skew < -int64(MaxClockSkew/time.Second) {
		return "", nil, fmt.Errorf("timestamp is %ds away from now: %w", skew, ErrStaleRequest)
	}
	hexSig, ok := strings.CutPrefix(rawSig, signatureScheme+"=")
	if !ok {
		return "", nil, fmt.Errorf("signature is not of scheme %s: %w", signatureScheme, ErrBadSignature)
	}
	sig, err = hex.DecodeString(hexSig)
	if err != nil {
		return "", nil, fmt.Errorf("signature is not hex: %w", ErrBadSignature)
	}
	if strings.ContainsAny(hexSig, "ABCDEF") {
		// Slack writes lowercase hex, and one signature has one
		// spelling: the same MAC in capitals is not Slack's header.
		return "", nil, fmt.Errorf("signature is not lowercase hex: %w", ErrBadSignature)
	}
	return ts, sig, nil
}

// mac computes the raw v0 signature of a timestamp and body.
func (v *Verifier) mac(ts string, body []byte) []byte {
	h := hmac.New(sha256.New, v.secret)
	h.Write([]byte(signatureScheme + ":" + ts + ":"))
	h.Write(body)
	return h.Sum(nil)
}

// ReadBody reads a request's whole body, at most MaxBody bytes. A longer
// body gives an error matching ErrTooLarge, for which the caller answers
// 413; w lets the server close the connection instead of reading the rest.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, fmt.Errorf("body over %d bytes: %w", MaxBody, ErrTooLarge)
		}
		return nil, fmt.Errorf("read request body: %w", err)
	}
	return body, nil
}

// Middleware reads and verifies each request before handing it to next
// with its raw body. A request whose signature headers are missing, stale
// or malformed is answered 401 before its body is read, so that unsigned
// traffic costs no memory and cannot hold a connection open by sending
// its body slowly. A body over MaxBody is answered 413, one that cannot
// be read 400, and a body that does not match the signature 401; next is
// not called for any of them. r.Body is replaced with a reader over the same
// bytes, so that next may still call r.ParseForm.
//
// Nothing is logged here: a log line about a bad request must not carry
// its body, its signature or the secret, and the server logs the status.
func (v *Verifier) Middleware(next func(w http.ResponseWriter, r *http.Request, body []byte)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := v.CheckHeader(r.Header); err != nil {
			// The unread body is not drained: the connection is closed
			// after this answer.
			w.Header().Set("Connection", "close")
			http.Error(w, "invalid request signature", http.StatusUnauthorized)
			return
		}
		body, err := ReadBody(w, r)
		switch {
		case errors.Is(err, ErrTooLarge):
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "cannot read request body", http.StatusBadRequest)
			return
		}
		if err := v.Verify(r.Header, body); err != nil {
			http.Error(w, "invalid request signature", http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next(w, r, body)
	})
}
