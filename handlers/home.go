package handlers

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
)

// The Home tab: each person's inbox in Slack (slackui.HomeView). Whom a
// call waits for is the runner's to say (WaitingCalls); a click in it
// goes through runner.Decide like any other, marked as made from an inbox.
//
// A view is published when the person opens the tab (app_home_opened),
// after they click in it, and whenever the runner reports that calls
// began or stopped waiting (runner.InboxChanged) for everyone who has
// opened the tab and is concerned: those the calls wait or waited for,
// and those who decided.

// HomeStore keeps who has opened the Home tab, so that their views are
// published again when something changes. It must be safe for concurrent
// use by many processes.
type HomeStore interface {
	HomeOpened(ctx context.Context, user string, at time.Time) error
	HomeOpeners(ctx context.Context, since time.Time) ([]string, error)
}

const (
	// homeOpenersFor is how long after opening the tab a person's view
	// is kept up to date.
	homeOpenersFor = 30 * 24 * time.Hour
)

// homeMetaPrefix marks the private metadata of a modal opened from the
// Home tab, so that its submission is decided as made from an inbox.
const homeMetaPrefix = "home:"

// Home publishes people's Home tabs. It is safe for concurrent use.
type Home struct {
	api     *slack.Client
	svc     *runner.Service
	store   Store
	openers HomeStore
	teamURL string
	now     func() time.Time
	log     logrus.FieldLogger
	conns   Connections // nil: no connections in the tab

	// A person's views are published one at a time, each read when its
	// turn comes, so that the last one published is the newest.
	publishing [64]sync.Mutex
}

// Opened records that user opened the tab, and publishes their view.
func (h *Home) Opened(ctx context.Context, user string) {
	if err := h.openers.HomeOpened(ctx, user, h.now()); err != nil {
		h.log.WithField("user", user).WithError(err).Warn("recording who opened the Home tab")
	}
	h.Publish(ctx, user, "")
}

// Changed publishes again the views of those concerned by a change of
// the inbox who have opened the tab.
func (h *Home) Changed(ctx context.Context, ch *runner.InboxChange) {
	if ch == nil {
		return
	}
	openers, err := ch.WatchersSince(h.now().Add(-homeOpenersFor)), error(nil)
	if ch.Watchers == nil {
		openers, err = h.openers.HomeOpeners(ctx, h.now().Add(-homeOpenersFor))
	}
	if err != nil {
		h.log.WithError(err).Warn("reading who opened the Home tab")
		return
	}
	calls := append(append([]runner.InboxEntry(nil), ch.Added...), ch.Removed...)
	for _, user := range openers {
		concerned := false
		for _, d := range ch.Decided {
			concerned = concerned || d.By == user
		}
		for _, e := range calls {
			if concerned {
				break
			}
			ok, err := h.svc.WaitsFor(ctx, e, user)
			if err != nil {
				// Unknown is not "not concerned": publishing again
				// costs little, a stale view shows a call as waiting.
				h.log.WithFields(logrus.Fields{"user": user, "thread": e.Thread}).WithError(err).Warn("checking whom a call waits for; publishing the view again")
				ok = true
			}
			concerned = ok
		}
		if concerned {
			h.Publish(ctx, user, "")
		}
	}
}

// Publish publishes user's view, with notice (if any) at its top: what
// happened to their last click.
func (h *Home) Publish(ctx context.Context, user, notice string) {
	lock := &h.publishing[fnv32(user)%uint32(len(h.publishing))]
	lock.Lock()
	defer lock.Unlock()
	log := h.log.WithField("user", user)
	// Only Slack threads: a conversation in the terminal (bot chat) has
	// no card to click.
	slackThread := func(e runner.InboxEntry) bool { _, _, _, err := slackui.ParseThread(e.Thread); return err == nil }
	calls, err := h.svc.WaitingCalls(ctx, runner.InboxQuery{User: user, Where: slackThread, Limit: slackui.HomeMaxCalls + 1})
	if err != nil {
		log.WithError(err).Warn("listing the calls waiting for someone")
		notice = strings.TrimSpace(notice + "\n" + slackui.TextTryAgain)
	}
	more := len(calls) > slackui.HomeMaxCalls
	calls = calls[:min(len(calls), slackui.HomeMaxCalls)]
	refs := make([]string, len(calls))
	for i, w := range calls {
		if refs[i], err = cardRef(ctx, h.store, w.Thread, w.AgentCall); err != nil {
			// The view is published all the same, without the calls
			// and saying to try again: the person's last click is
			// answered, never left without a word.
			log.WithField("thread", w.Thread).WithError(err).Warn("finding a card's reference")
			calls, refs, more = nil, nil, false
			notice = strings.TrimSpace(notice + "\n" + slackui.TextTryAgain)
			break
		}
	}
	recent, err := h.svc.RecentDecisions(ctx, user, slackui.HomeMaxRecent)
	if err != nil {
		log.WithError(err).Warn("reading recent decisions")
	}
	var conns []mcpauth.Personal
	if h.conns != nil {
		if conns, err = h.conns.Personal(ctx, user); err != nil {
			log.WithError(err).Warn("listing a person's MCP connections")
		}
	}
	view := slackui.HomeView(slackui.HomeContent{Calls: calls, Refs: refs, More: more, Recent: recent, Notice: notice, TeamURL: h.teamURL, Connections: conns}, h.now())
	if _, err := h.api.PublishViewContext(ctx, slack.PublishViewContextRequest{UserID: user, View: view}); err != nil {
		log.WithError(err).Warn("publishing the Home tab")
	}
}

// cardRef is the opaque value of the buttons of c's card in thread, for
// its decision round: the one the card was posted with, or a new one if
// there is none yet (the card and the Home tab share it).
func cardRef(ctx context.Context, store Store, thread string, c agent.Call) (string, error) {
	key := cardRefKey(c.Key, c.Attempts)
	claims, err := store.ClaimValues(ctx, thread, []string{key})
	if err != nil {
		return "", err
	}
	if v, ok := claims[key]; ok {
		return cardButtonValue(thread, c, v), nil
	}
	return newCardRef(ctx, store, thread, c)
}

// fnv32 is the FNV-1a hash of s.
func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

func cardRefKey(call string, attempt int) string { return fmt.Sprintf("cardref:%s#%d", call, attempt) }
