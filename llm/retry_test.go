package llm_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// sleeps records the waits Retry asks for, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

func TestRetryAgainstServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		fails       int
		status      int
		wantErr     bool
		unavailable bool
		requests    int
	}{
		{"500, 500, then 200", 2, http.StatusInternalServerError, false, false, 3},
		{"429 then 200", 1, http.StatusTooManyRequests, false, false, 2},
		{"persistent 500", 10, http.StatusInternalServerError, true, true, 4},
		{"persistent 503", 10, http.StatusServiceUnavailable, true, true, 4},
		{"400 is not retried", 1, http.StatusBadRequest, true, false, 1},
		{"401 is not retried", 1, http.StatusUnauthorized, true, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewOpenAIServer(t, llmtest.Reply("hello"))
			srv.FailNext(tt.fails, tt.status)
			var s sleeps
			m := llm.Retry(newOpenAI(t, srv), llm.RetryOptions{Attempts: 4, BaseDelay: time.Second, MaxDelay: 10 * time.Second, Sleep: s.sleep})

			got, err := m.Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Generate() = %+v, %v; want error %v", got, err, tt.wantErr)
			}
			if err == nil && got.Content != "hello" {
				t.Errorf("Generate() = %+v, want the scripted reply", got)
			}
			if gotU := errors.Is(err, llm.ErrUnavailable); gotU != tt.unavailable {
				t.Errorf("errors.Is(%v, ErrUnavailable) = %v, want %v", err, gotU, tt.unavailable)
			}
			var se *llm.StatusError
			if err != nil && (!errors.As(err, &se) || se.StatusCode != tt.status) {
				t.Errorf("Generate() error = %v, want it to wrap the last StatusError %d", err, tt.status)
			}
			if n := len(srv.Requests()); n != tt.requests {
				t.Errorf("server got %d requests, want %d", n, tt.requests)
			}
			if n := len(s.all()); n != tt.requests-1 {
				t.Errorf("Retry slept %d times, want %d", n, tt.requests-1)
			}
		})
	}
}

func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	var s sleeps
	base, maxDelay := 100*time.Millisecond, 500*time.Millisecond
	model := llmtest.NewScripted()
	for range 6 {
		model.ThenError(&llm.StatusError{StatusCode: 502})
	}
	m := llm.Retry(model, llm.RetryOptions{Attempts: 6, BaseDelay: base, MaxDelay: maxDelay, Sleep: s.sleep})
	if _, err := m.Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil); !errors.Is(err, llm.ErrUnavailable) {
		t.Fatalf("Generate() error = %v, want ErrUnavailable", err)
	}
	// Nominal waits 100, 200, 400, 500, 500 ms; each is jittered to
	// between half and all of it.
	nominal := []time.Duration{base, 2 * base, 4 * base, maxDelay, maxDelay}
	got := s.all()
	if len(got) != len(nominal) {
		t.Fatalf("waits = %v, want %d", got, len(nominal))
	}
	for i, d := range got {
		if d < nominal[i]/2 || d > nominal[i] {
			t.Errorf("wait %d = %v, want between %v and %v", i, d, nominal[i]/2, nominal[i])
		}
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	var s sleeps
	model := llmtest.NewScripted().
		ThenError(&llm.StatusError{StatusCode: 429, RetryAfter: 3 * time.Second}).
		ThenError(&llm.StatusError{StatusCode: 429, RetryAfter: time.Hour}).
		Then(llmtest.Reply("ok"))
	m := llm.Retry(model, llm.RetryOptions{BaseDelay: 10 * time.Millisecond, MaxDelay: 5 * time.Second, Sleep: s.sleep})
	if _, err := m.Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil); err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	want := []time.Duration{3 * time.Second, 5 * time.Second} // the second capped at MaxDelay
	if got := s.all(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("waits = %v, want %v", got, want)
	}
}

// A rate limit whose Retry-After is an HTTP date (as proxies and some
// compatible servers send it) is waited out until that time, not for a
// backoff of a second.
func TestRetryAfterAsADate(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t)
	at := time.Now().Add(8 * time.Second).UTC()
	srv.ThenRaw(llmtest.Raw{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {at.Format(http.TimeFormat)}},
		Body: `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`})
	srv.Then(llmtest.Reply("ok"))
	var s sleeps
	m := llm.Retry(newOpenAI(t, srv), llm.RetryOptions{BaseDelay: 10 * time.Millisecond, Sleep: s.sleep})
	if _, err := m.Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil); err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	// The date has whole seconds: the wait is up to a second shorter.
	if got := s.all(); len(got) != 1 || got[0] <= 5*time.Second || got[0] > 8*time.Second {
		t.Errorf("waits = %v, want one of about 8s (until %s)", got, at.Format(http.TimeFormat))
	}
}

func TestRetryStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	model := llmtest.NewScripted().
		ThenError(&llm.StatusError{StatusCode: 500}).
		Then(llmtest.Reply("too late"))
	m := llm.Retry(model, llm.RetryOptions{Sleep: func(ctx context.Context, d time.Duration) error {
		cancel() // the caller gives up while Retry waits
		<-ctx.Done()
		return ctx.Err()
	}})
	_, err := m.Generate(ctx, []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, llm.ErrUnavailable) {
		t.Fatalf("Generate() error = %v, want context.Canceled and not ErrUnavailable", err)
	}
	if n := len(model.Requests()); n != 1 {
		t.Errorf("model called %d times, want 1", n)
	}
}

func TestRetryDefaultSleepHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	model := llmtest.NewScripted().ThenError(&llm.StatusError{StatusCode: 500})
	m := llm.Retry(model, llm.RetryOptions{BaseDelay: time.Hour, MaxDelay: time.Hour})
	start := time.Now()
	_, err := m.Generate(ctx, []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Generate() error = %v, want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Generate() returned after %v, want soon after the deadline", elapsed)
	}
}

func TestRetryName(t *testing.T) {
	t.Parallel()
	m := llm.Retry(llmtest.NewScripted().WithName("openai gpt-test"), llm.RetryOptions{})
	if got := m.Name(); got != "openai gpt-test" {
		t.Errorf("Name() = %q, want %q", got, "openai gpt-test")
	}
}

func TestIsTransient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", errors.New("boom"), false},
		{"408", &llm.StatusError{StatusCode: 408}, true},
		{"409", &llm.StatusError{StatusCode: 409}, true},
		{"429", &llm.StatusError{StatusCode: 429}, true},
		{"500", &llm.StatusError{StatusCode: 500}, true},
		{"529", &llm.StatusError{StatusCode: 529}, true},
		{"400", &llm.StatusError{StatusCode: 400}, false},
		{"401", &llm.StatusError{StatusCode: 401}, false},
		{"404", &llm.StatusError{StatusCode: 404}, false},
		{"wrapped 503", wrap(&llm.StatusError{StatusCode: 503}), true},
		{"script exhausted", llmtest.ErrScriptExhausted, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := llm.IsTransient(tt.err); got != tt.want {
				t.Errorf("IsTransient(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func wrap(err error) error { return errors.Join(errors.New("context"), err) }

// The providers say with x-should-retry whether asking again may help,
// and their SDKs follow it before the status: a 500 that says false is
// not asked again, a 400 that says true is.
func TestRetryFollowsShouldRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider    string
		status      int
		shouldRetry string
		requests    int
	}{
		{"openai", 500, "false", 1},
		{"anthropic", 529, "false", 1},
		{"openai", 400, "true", 2},
		{"anthropic", 409, "true", 2},
		{"anthropic", 500, "", 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %d %q", tt.provider, tt.status, tt.shouldRetry), func(t *testing.T) {
			p := anthropicRecorded(t)
			body := `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`
			if tt.provider == "openai" {
				p = openAIRecorded(t, llm.OpenAIOptions{})
				body = `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`
			}
			header := http.Header{}
			if tt.shouldRetry != "" {
				header.Set("X-Should-Retry", tt.shouldRetry)
			}
			p.then(llmtest.Raw{Status: tt.status, Header: header, Body: body})
			p.thenMsg(llmtest.Reply("ok"))
			m := llm.Retry(p.model, llm.RetryOptions{Sleep: func(context.Context, time.Duration) error { return nil }})
			reply, _, err := ask(context.Background(), m, false)
			if n := p.requests(); n != tt.requests {
				t.Errorf("%d requests (reply %q, error %v), want %d", n, reply.Content, err, tt.requests)
			}
			if tt.requests == 2 && (err != nil || reply.Content != "ok") {
				t.Errorf("reply = %q, %v; want the retried answer", reply.Content, err)
			}
		})
	}
}
