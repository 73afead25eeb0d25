package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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
//   - The request body can be adjusted before it is sent (see
//     mergeTurns in anthropic.go, and the temperature).
//   - A 200 answer is read by the request's exchange, not by langchaingo
//     (see answer.go).
type doer struct {
	client *http.Client
	// dropHeader is removed from every request (the credentials header
	// when no key was configured).
	dropHeader string
	// header is added to every request.
	header http.Header
	// rewrite, when set, replaces the JSON request body; x is the
	// request's exchange, nil for a request without one.
	rewrite func(x *exchange, body []byte) ([]byte, error)
	// now tells the time, for a Retry-After given as a date.
	now func() time.Time
	// keyName is where the API key came from (StatusError.KeyName).
	keyName string
}

func (d *doer) Do(req *http.Request) (*http.Response, error) {
	x := exchangeFrom(req.Context())
	if d.rewrite != nil && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		body, err = d.rewrite(x, body)
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
	for k, v := range d.header {
		req.Header[k] = v
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
		e := newStatusError(resp.StatusCode, resp.Header, body, d.now())
		if e.StatusCode == http.StatusUnauthorized {
			e.KeyName = d.keyName
		}
		return nil, e
	}
	if x != nil {
		x.readAnswer(req.Context(), resp)
		return nil, errAnswerRead
	}
	return resp, nil
}

func newDoer(c *http.Client) *doer {
	if c == nil {
		c = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	return &doer{client: c, now: time.Now}
}

// ignoreChunk is the streaming callback langchaingo is given: it only
// makes langchaingo ask for a stream, which the exchange reads itself.
func ignoreChunk(context.Context, []byte) error { return nil }

// result is the outcome of a model request through langchaingo: the
// answer the exchange read, or the error of a request that got none.
func (x *exchange) result(name string, err error) (Message, error) {
	if x.read {
		if x.err != nil {
			return Message{}, fmt.Errorf("%s: %w", name, x.err)
		}
		return x.reply, nil
	}
	if err == nil {
		err = errors.New("no answer")
	}
	return Message{}, fmt.Errorf("%s: %w", name, cause(err))
}

// setTemperature sets the request's temperature to t, or removes it when
// t is nil (langchaingo always sends one: 0 unless told otherwise).
func setTemperature(body []byte, t *float64) ([]byte, error) {
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(body, &payload); err != nil {
		return nil, fmt.Errorf("set temperature: %w", err)
	}
	if t == nil {
		if _, ok := payload["temperature"]; !ok {
			return body, nil
		}
		delete(payload, "temperature")
	} else {
		v, err := json.Marshal(*t)
		if err != nil {
			return nil, fmt.Errorf("set temperature: %w", err)
		}
		payload["temperature"] = v
	}
	return json.Marshal(payload)
}

// ReasoningModel reports whether an OpenAI model takes no temperature
// other than its default: the o-series (o1, o3, o4-mini, …) and the
// gpt-5 family. A name with a provider prefix ("openai/o3") counts too.
func ReasoningModel(model string) bool {
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndex(m, "/"); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range []string{"o1", "o3", "o4", "gpt-5"} {
		if m == p || strings.HasPrefix(m, p+"-") || strings.HasPrefix(m, p+".") {
			return true
		}
	}
	return false
}
