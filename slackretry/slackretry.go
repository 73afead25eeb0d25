// Package slackretry makes Slack Web API calls that wait out Slack's rate
// limit: a call Slack answers 429 is made again after the time Slack
// names, a few times, before its error is returned.
package slackretry

import (
	"context"
	"errors"
	"time"

	"github.com/slack-go/slack"
)

// maxRetries is how many times a rate-limited call is made again.
const maxRetries = 5

// Do calls fn again while Slack answers 429, waiting as it says (at
// least 100ms, at most 30s), up to maxRetries times or until ctx ends.
func Do(ctx context.Context, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		var limited *slack.RateLimitedError
		if !errors.As(err, &limited) || attempt >= maxRetries {
			return err
		}
		wait := min(max(limited.RetryAfter, 100*time.Millisecond), 30*time.Second)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Post posts a message and returns its ts.
func Post(ctx context.Context, api *slack.Client, channel string, opts ...slack.MsgOption) (string, error) {
	var ts string
	err := Do(ctx, func() error {
		var err error
		_, ts, err = api.PostMessageContext(ctx, channel, opts...)
		return err
	})
	return ts, err
}

// Update changes the message ts of channel.
func Update(ctx context.Context, api *slack.Client, channel, ts string, opts ...slack.MsgOption) error {
	return Do(ctx, func() error {
		_, _, _, err := api.UpdateMessageContext(ctx, channel, ts, opts...)
		return err
	})
}

// Refused reports whether err is Slack's definite refusal of a request
// (ok:false with an error code that will not change by asking again),
// rather than no answer: a rate limit, a server error, a broken
// connection.
func Refused(err error) bool {
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) {
		return false
	}
	switch se.Err {
	case "internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited", "team_added_to_org":
		return false
	}
	return true
}
