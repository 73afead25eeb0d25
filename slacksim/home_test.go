package slacksim_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/slacksim"
)

// home waits until user's Home tab satisfies ok, and returns its view.
func (w *world) home(user, what string, ok func(view string) bool) string {
	w.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		if v, found := w.sim.State().Homes[user]; found {
			last = content(slacksim.Message{Blocks: v.View})
			if ok(last) {
				return last
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Fatalf("timed out waiting for %s's Home tab %s; last: %s", user, what, last)
	return ""
}

// Opening the Home tab tells the bot, which publishes it; its Approve
// button is clicked as Slack sends a Home tab's clicks, with no channel,
// and decides the call.
func TestHomeTabThroughTheBot(t *testing.T) {
	w := newWorldOf(t, true)
	stream := w.events()
	root, _ := w.request("/home")
	w.mustUI("/ui/home", map[string]any{"user": teammate})
	w.home(teammate, "to list the call", func(v string) bool {
		return strings.Contains(v, `"action_id":"approve"`) && strings.Contains(v, "GET "+w.target.URL+"/home")
	})
	if first := stream.next(t); first.name != "snapshot" {
		t.Fatalf("first event %q, want snapshot", first.name)
	}
	// The page hears of the Home tab as it is published.
	for ev := stream.next(t); ev.name != "home"; {
		ev = stream.next(t)
	}

	w.mustUI("/ui/click", map[string]any{"user": teammate, "home": true, "action_id": "approve"})
	w.message(root.TS, "Done: the request to "+w.target.URL+"/home returned HTTP 200 OK")
	if n := w.target.Count("/home"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
	w.home(teammate, "to show the approval instead of the call", func(v string) bool {
		return !strings.Contains(v, `"action_id":"approve"`) && strings.Contains(v, "Approved `http_request`")
	})
	if status, _ := w.ui("/ui/click", map[string]any{"user": teammate, "home": true, "action_id": "approve"}); status != http.StatusNotFound {
		t.Errorf("clicking Approve in a Home tab without the call answered %d, want %d", status, http.StatusNotFound)
	}
	if status, _ := w.ui("/ui/home", map[string]any{"user": "U0NOBODY"}); status != http.StatusBadRequest {
		t.Errorf("opening the Home tab of someone unknown answered %d, want %d", status, http.StatusBadRequest)
	}
	if v := w.sim.State().Homes[you]; !bytes.Equal(v.View, nil) {
		t.Errorf("a Home tab was published for someone who never opened it: %s", v.View)
	}
}
