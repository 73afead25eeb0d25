package slacktest

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/countersign/countersign/slacksim/internal/wire"
)

// FormContentType is the content type of slash commands and interactions.
const FormContentType = "application/x-www-form-urlencoded"

// Signer signs requests the way Slack does (v0 request signing), so that a
// handler under test accepts them as Slack's.
type Signer struct {
	secret []byte
}

// NewSigner returns a signer for an app's signing secret.
func NewSigner(secret string) Signer { return Signer{secret: []byte(secret)} }

// Signature is the X-Slack-Signature of a body sent at a time: "v0=" and
// the hex HMAC-SHA256 of "v0:<unix time>:<body>".
func (s Signer) Signature(at time.Time, body []byte) string {
	return wire.Signature(s.secret, at, body)
}

// Sign sets the X-Slack-Request-Timestamp and X-Slack-Signature headers of
// req for body, as sent at a time.
func (s Signer) Sign(req *http.Request, body []byte, at time.Time) {
	wire.Sign(req, s.secret, body, at)
}

// Request builds a signed request with body, as sent at a time. It is a
// client request: send it with an http.Client to a running bot, or hand
// it to a handler's ServeHTTP. Like httptest.NewRequest, it panics on an
// invalid method or URL.
func (s Signer) Request(method, url string, contentType string, body []byte, at time.Time) *http.Request {
	req, err := http.NewRequestWithContext(context.Background(), method, url, bytes.NewReader(body))
	if err != nil {
		panic("slacktest: " + err.Error())
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	s.Sign(req, body, at)
	return req
}
