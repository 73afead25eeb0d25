package llm

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"time"
)

// DefaultHTTPTimeout bounds one model request when the options give no
// HTTP client. A reply with many tokens can take a minute or more.
const DefaultHTTPTimeout = 3 * time.Minute

// maxErrorBody is how much of an error answer is read for its message.
const maxErrorBody = 64 << 10

// doer is the HTTP layer both langchaingo clients send through (they
// accept anything with a Do method). It exists for three reasons:
//
//   - Errors stay matchable. langchaingo turns a non-200 answer into a
//     string and the OpenAI client turns network errors into generic
//     text; doer returns a *StatusError for the former and shields the
//     latter (see transportError), so Retry can tell a 500 from a 400.
//   - A client configured without an API key (a local OpenAI-compatible
//     server) sends no credentials header at all, although langchaingo
//     insists on a non-empty token.
//   - The Anthropic request body can be repaired before it is sent
//     (see mergeTurns in anthropic.go).
type doer struct {
	client *http.Client
	// dropHeader is removed from every request (the credentials header
	// when no key was configured).
	dropHeader string
	// rewrite, when set, replaces the JSON request body.
	rewrite func(body []byte) ([]byte, error)
}

func (d *doer) Do(req *http.Request) (*http.Response, error) {
	if d.rewrite != nil && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		body, err = d.rewrite(body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	if d.dropHeader != "" {
		req.Header.Del(d.dropHeader)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, &transportError{err: err}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil {
			return nil, &transportError{err: err}
		}
		return nil, newStatusError(resp.StatusCode, resp.Header, body)
	}
	return resp, nil
}

func newDoer(c *http.Client) *doer {
	if c == nil {
		c = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	return &doer{client: c}
}
