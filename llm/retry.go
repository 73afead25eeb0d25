package llm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Defaults of RetryOptions. Four attempts wait about 1+2+4 seconds in
// between (less with jitter): long enough to ride out a blip or a brief
// rate limit, short enough that a person in Slack is not left wondering.
const (
	DefaultRetryAttempts  = 4
	DefaultRetryBaseDelay = time.Second
	DefaultRetryMaxDelay  = 20 * time.Second
)

// RetryOptions configure Retry. Zero fields take the defaults.
type RetryOptions struct {
	// Attempts is the number of calls in all, the first included.
	Attempts int
	// BaseDelay is the wait before the second attempt; each further wait
	// doubles, up to MaxDelay.
	BaseDelay time.Duration
	// MaxDelay caps one wait, including a provider's Retry-After.
	MaxDelay time.Duration
	// Sleep waits d or until ctx ends, returning ctx's error in that case.
	// Tests replace it to run without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Retry returns a Model that calls m again when a call fails with a
// transient error (see IsTransient: network errors, HTTP 408, 409, 429 and
// 5xx). Other errors, such as HTTP 400 or 401, are returned at once,
// unchanged.
//
// Waits grow exponentially from BaseDelay with jitter (each wait is
// between half and all of its nominal length), and a provider's
// Retry-After is honoured up to MaxDelay. When ctx ends, Retry stops.
// When the last attempt fails, the error wraps both ErrUnavailable and the
// last failure, so errors.Is(err, ErrUnavailable) tells the caller the
// provider could not be reached and the run should be saved as failed.
func Retry(m Model, opts RetryOptions) Model {
	if opts.Attempts <= 0 {
		opts.Attempts = DefaultRetryAttempts
	}
	if opts.BaseDelay <= 0 {
		opts.BaseDelay = DefaultRetryBaseDelay
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = DefaultRetryMaxDelay
	}
	if opts.MaxDelay < opts.BaseDelay {
		opts.MaxDelay = opts.BaseDelay
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	return &retrying{model: m, opts: opts}
}

type retrying struct {
	model Model
	opts  RetryOptions
}

func (r *retrying) Name() string { return r.model.Name() }

// CheckTools forwards to the wrapped model; nothing is left out by a
// model that does not check.
func (r *retrying) CheckTools(defs []ToolDef) []LeftOut {
	if c, ok := r.model.(ToolChecker); ok {
		return c.CheckTools(defs)
	}
	return nil
}

var _ ToolChecker = (*retrying)(nil)

func (r *retrying) Generate(ctx context.Context, msgs []Message, tools []ToolDef) (Message, error) {
	return r.generate(ctx, func() (Message, error) { return r.model.Generate(ctx, msgs, tools) }, nil)
}

// generate calls try until it succeeds, fails for good or runs out of
// attempts. broken, when set, is told of each failed attempt (last: no
// attempt follows).
func (r *retrying) generate(ctx context.Context, try func() (Message, error), broken func(last bool)) (Message, error) {
	for attempt := 1; ; attempt++ {
		reply, err := try()
		if err != nil && broken != nil {
			broken(ctx.Err() != nil || !IsTransient(err) || attempt >= r.opts.Attempts)
		}
		switch {
		case err == nil:
			return reply, nil
		case ctx.Err() != nil, !IsTransient(err):
			return Message{}, err
		case attempt >= r.opts.Attempts:
			return Message{}, fmt.Errorf("%w after %d attempts: %w", ErrUnavailable, attempt, err)
		}
		if serr := r.opts.Sleep(ctx, r.delay(attempt, err)); serr != nil {
			return Message{}, fmt.Errorf("retry %s: %w (last error: %v)", r.model.Name(), serr, err)
		}
	}
}

// delay is the wait after the given failed attempt (1 for the first).
func (r *retrying) delay(attempt int, err error) time.Duration {
	d := r.opts.BaseDelay
	for i := 1; i < attempt && d < r.opts.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, r.opts.MaxDelay)
	d = d/2 + rand.N(d/2+1) // jitter: spread retries of many runs apart
	var se *StatusError
	if errors.As(err, &se) && se.RetryAfter > d {
		d = min(se.RetryAfter, r.opts.MaxDelay)
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
