package handlers_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// changes records the membership changes the server passes on.
type changes struct {
	mu   sync.Mutex
	got  []string // event: group or channel
	fail error
}

func (c *changes) Changed(_ context.Context, eventID string, groups, channels []string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return false, c.fail
	}
	for _, id := range append(slices.Clone(groups), channels...) {
		c.got = append(c.got, eventID+": "+id)
	}
	return true, nil
}

// The membership events are passed on as the group or channel they name,
// with their event ID, before they are acknowledged; one that could not
// be recorded is answered 503, for Slack to deliver it again; one that
// names no group or channel is acknowledged and passed on as nothing.
func TestMembershipEventsEndpoint(t *testing.T) {
	t.Parallel()
	const secret = "membership-secret"
	web := slacktest.NewServer(t)
	rec := &changes{}
	srv := handlers.New(slack.New("xoxb-test", slack.OptionAPIURL(web.URL())), nil, nil, secret, handlers.Options{Membership: rec})
	handler := srv.Handler()
	signer := slacktest.NewSigner(secret)
	post := func(eventID string, ev map[string]any) int {
		t.Helper()
		req := signer.Request(http.MethodPost, "http://bot/slack/events", "application/json", slacktest.EventCallback(eventID, ev), time.Now())
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		return w.Code
	}
	for _, tt := range []struct {
		id   string
		ev   map[string]any
		code int
	}{
		{"Ev1", map[string]any{"type": "subteam_members_changed", "subteam_id": "S0OPS", "added_users": []string{"U0MALLORY"}}, 200},
		{"Ev2", map[string]any{"type": "subteam_updated", "subteam": map[string]any{"id": "S0OPS", "users": []string{"U0MALLORY"}}}, 200},
		{"Ev3", map[string]any{"type": "member_left_channel", "user": "U0MALLORY", "channel": "C0DEPLOY"}, 200},
		{"Ev4", map[string]any{"type": "member_joined_channel", "user": "U0MALLORY", "channel": "C0DEPLOY"}, 200},
		{"Ev5", map[string]any{"type": "subteam_members_changed", "subteam_id": "not a group"}, 200},
	} {
		if code := post(tt.id, tt.ev); code != tt.code {
			t.Errorf("%s %v answered %d, want %d", tt.id, tt.ev["type"], code, tt.code)
		}
	}
	want := []string{"Ev1: S0OPS", "Ev2: S0OPS", "Ev3: C0DEPLOY", "Ev4: C0DEPLOY"}
	if !slices.Equal(rec.got, want) {
		t.Errorf("changes passed on: %q, want %q", rec.got, want)
	}
	rec.fail = errors.New("redis: connection refused")
	if code := post("Ev6", map[string]any{"type": "subteam_members_changed", "subteam_id": "S0OPS"}); code != http.StatusServiceUnavailable {
		t.Errorf("a change that could not be recorded answered %d, want 503", code)
	}
	if len(web.Calls()) != 0 {
		t.Errorf("membership events made %d Slack calls, want none: %v", len(web.Calls()), web.Calls())
	}
}
