package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrUnavailable is what a model call wrapped in Retry returns (wrapped,
// together with the last failure) when every attempt failed for a reason
// that retrying could have fixed: the provider is down, overloaded or
// unreachable. The caller checkpoints the run as failed and offers a retry.
var ErrUnavailable = errors.New("model unavailable")

// ErrContextFull is matched (errors.Is) by the error of a provider that
// refuses a request because the conversation does not fit the model's
// context window (OpenAI's code context_length_exceeded, Anthropic's
// "prompt is too long", the same words from OpenAI-compatible servers).
// Asking again cannot help, so it is not retried, and its text says what
// to do instead.
var ErrContextFull = errors.New("this conversation no longer fits in the model's context window: start a new thread to go on")

// StatusError is a provider's answer with an HTTP status other than 200.
type StatusError struct {
	StatusCode int
	// Message is the provider's error message, if its body had one.
	Message string
	// Type is the provider's error type or code, if its body had one
	// (e.g. "rate_limit_exceeded", "insufficient_quota",
	// "overloaded_error").
	Type string
	// RetryAfter is how long the provider asked the client to wait
	// (retry-after-ms, or Retry-After in seconds or as an HTTP date);
	// zero when it did not say.
	RetryAfter time.Duration
	// ContextFull: the request was refused because the conversation is
	// longer than the model's context window (see ErrContextFull).
	ContextFull bool
	// Param is the request parameter the provider refused, when it said
	// (OpenAI's "param", e.g. "temperature").
	Param string
	// ShouldRetry is the provider's x-should-retry header, "true" or
	// "false" ("" when absent): OpenAI and Anthropic say with it whether
	// a retry may succeed, which their own SDKs follow before the status.
	ShouldRetry string
	// KeyName, for a refused key (HTTP 401), is where the key came from
	// (an environment variable), which the error names: what to fix.
	KeyName string
}

func (e *StatusError) Error() string {
	if isQuota(e.Type) {
		return fmt.Sprintf("%v (HTTP %d: %s)", ErrOutOfQuota, e.StatusCode, e.Message)
	}
	if e.ContextFull {
		return fmt.Sprintf("%v (HTTP %d: %s)", ErrContextFull, e.StatusCode, e.Message)
	}
	s := fmt.Sprintf("HTTP %d", e.StatusCode)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.KeyName != "" {
		s += "; check " + e.KeyName
	}
	return s
}

// Is matches ErrOutOfQuota for a provider that says the account has no
// quota left (OpenAI's 429 insufficient_quota), and ErrContextFull.
func (e *StatusError) Is(target error) bool {
	return (target == ErrOutOfQuota && isQuota(e.Type)) || (target == ErrContextFull && e.ContextFull)
}

// Transient reports whether sending the same request again may succeed:
// what the provider's x-should-retry header says, else a tool call the
// model wrote wrong (Groq's tool_use_failed: another sample may be
// right), request timeout (408), conflict (409), rate limit (429) and
// server errors (5xx, including Anthropic's 529 "overloaded"). Other 4xx
// answers are the request's fault and fail the same way every time, and
// so does a request for an account out of quota or a conversation too
// long for the model, whatever the header says.
func (e *StatusError) Transient() bool {
	switch {
	case isQuota(e.Type), e.ContextFull:
		return false
	case e.ShouldRetry == "true":
		return true
	case e.ShouldRetry == "false":
		return false
	case e.Type == toolUseFailed:
		return true
	case e.StatusCode == 408, e.StatusCode == 409, e.StatusCode == 429:
		return true
	case e.StatusCode >= 500:
		return true
	}
	return false
}

// Final reports whether sending the conversation again cannot succeed,
// whenever it is sent: it is longer than the model's context window, or
// too large for the provider (413). Such a run is checkpointed as failed
// for good (graph.IsFinal) and offered no retry. An account out of quota,
// a bad key, an unknown model or tools' schemas the provider refuses are
// not final: someone can fix them (the schemas are sent as they are at
// each request), and a retry of the same conversation then succeeds.
func (e *StatusError) Final() bool {
	switch {
	case isQuota(e.Type) || e.ShouldRetry == "true":
		return false
	}
	return e.ContextFull || e.StatusCode == 413
}

// IsTransient reports whether err is a failure that retrying the model call
// may fix: a transient HTTP status (see StatusError.Transient), a network
// error, a connection cut short, or any error in the chain with a
// Transient() bool method that returns true. Cancellation of the caller's
// context is not decided here; Retry checks the context itself.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var transient interface{ Transient() bool }
	if errors.As(err, &transient) {
		return transient.Transient()
	}
	var netErr net.Error // *url.Error from net/http, *net.OpError, DNS errors…
	if errors.As(err, &netErr) {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// transportError carries a network error from the HTTP client through
// langchaingo. langchaingo's OpenAI client replaces errors it recognises
// as network errors with generic text ("network error: failed to reach
// API server"), which would hide both the cause and a cancelled context.
// This wrapper deliberately has no Unwrap method, so that langchaingo
// passes it through untouched; the client unwraps it again (cause).
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }

// cause returns the error a model client reports for an error that came
// out of langchaingo: the original network error or the StatusError the
// HTTP layer produced, without langchaingo's wrapping, or err itself.
func cause(err error) error {
	var te *transportError
	if errors.As(err, &te) {
		return te.err
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se
	}
	return err
}

// newStatusError builds the error for a non-200 answer. Both providers
// send {"error": {"message": …}}, and compatible servers other shapes
// (see errorBody); anything else is quoted, shortened.
func newStatusError(status int, header map[string][]string, body []byte, now time.Time) *StatusError {
	e := &StatusError{StatusCode: status, RetryAfter: retryAfter(header, now)}
	if v := strings.ToLower(strings.TrimSpace(headerValue(header, "X-Should-Retry"))); v == "true" || v == "false" {
		e.ShouldRetry = v
	}
	var shape errorBody
	if json.Unmarshal(body, &shape) == nil {
		if pe := shape.providerError(); pe != nil && pe.Message != "" {
			e.Message = truncate(pe.Message, 1000)
			e.Type = pe.streamError().Type
			_ = json.Unmarshal(pe.Param, &e.Param) // a string, or null
			e.ContextFull = (status == 400 || status == 413) && pe.contextFull()
			return e
		}
	}
	e.Message = truncate(strings.Join(strings.Fields(string(body)), " "), 200)
	return e
}

// contextFullWords are how providers say a request is longer than the
// model's context window: OpenAI and vLLM ("This model's maximum context
// length is 128000 tokens"), Anthropic ("prompt is too long: 208576
// tokens > 200000 maximum", "input length and `max_tokens` exceed context
// limit"), llama-server ("the request exceeds the available context
// size"), SGLang ("The input (5000 tokens) is longer than the model's
// context length"), LiteLLM and others ("context window").
var contextFullWords = []string{
	"maximum context length", "prompt is too long", "exceed context limit",
	"exceeds the available context size", "longer than the model's context length", "context window",
}

// contextFull reports whether the error says the conversation does not
// fit the model's context window.
func (e *providerError) contextFull() bool {
	var code string
	_ = json.Unmarshal(e.Code, &code)
	if code == "context_length_exceeded" || e.Type == "context_length_exceeded" || e.Type == "exceed_context_size_error" {
		return true
	}
	msg := strings.ToLower(e.Message)
	for _, w := range contextFullWords {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// retryAfter reads the delay a provider asked for, if any: OpenAI sends
// retry-after-ms, both send Retry-After in seconds, and a proxy or a
// compatible server may send Retry-After as an HTTP date (RFC 9110),
// which is read as the time from now until then.
func retryAfter(header map[string][]string, now time.Time) time.Duration {
	// A wait longer than a day is a day: a float that large does not
	// convert to a Duration.
	const most = 24 * time.Hour
	if ms, err := strconv.ParseFloat(headerValue(header, "Retry-After-Ms"), 64); err == nil && ms > 0 {
		return time.Duration(min(ms, float64(most/time.Millisecond)) * float64(time.Millisecond))
	}
	v := strings.TrimSpace(headerValue(header, "Retry-After"))
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(min(s, most.Seconds()) * float64(time.Second))
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// headerValue is the first value of a canonical header key, or "".
func headerValue(header map[string][]string, key string) string {
	if v := header[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// truncate shortens s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
