package slackretry_test

import (
	"context"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackretry"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// A message Slack first refuses with 429 is posted once the wait it
// names is over: the caller sees the message, not the rate limit.
func TestPostWaitsOutTheRateLimit(t *testing.T) {
	web := slacktest.NewServer(t)
	api := slack.New("xoxb-test", slack.OptionAPIURL(web.URL()))
	web.RateLimitNext("chat.postMessage", 1, 10*time.Millisecond) // Slack says 1s
	ts, err := slackretry.Post(context.Background(), api, "C1", slack.MsgOptionText("hello", false))
	if err != nil || ts == "" {
		t.Fatalf("Post = %q, %v; want a ts", ts, err)
	}
	if n := len(web.CallsTo("chat.postMessage")); n != 2 {
		t.Fatalf("chat.postMessage called %d times, want the rate-limited call and the one that posted", n)
	}
}
