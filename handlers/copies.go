package handlers

// Telling approvers beyond the thread: copies of a card in the rule's
// notify channel and in direct messages, kept in step with the card, and
// the reminders and escalations the runner's schedule sends.
//
// A copy carries the card's own buttons (the same action IDs and opaque
// value), so a click on it goes through runner.Decide like a click on the
// card; Decide accepts it because the copy is recorded under
// runner.CopyKey, in the thread's claims, where every replica finds it to
// update it.

import (
	"context"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackdir"
	"github.com/countersign/countersign/slackui"
)

// maxDMs caps the direct messages of one card: a user group larger than
// this is better told through a notify channel.
const maxDMs = 50

// permalinkKey is the thread's claim holding the link to its root
// message, which copies of its cards show.
const permalinkKey = "permalink"

// WithGroups makes the reporter send a card by direct message to the
// members of the user groups its rule lists (notify_dm); without it only
// the users listed by ID get one.
func (r *Reporter) WithGroups(g *slackdir.Groups) *Reporter {
	r.groups = g
	return r
}

// postCopies posts the copies of c's card that e asks for, and records
// each; a copy recorded already (the card shown again after a crash) is
// not posted again. Failures are logged: the card in the thread stands.
// It reports whether the index of the copies is recorded, and then adds
// it (copiesKey) and the link to the thread the copies show to rec.
func (r *Reporter) postCopies(ctx context.Context, e runner.Event, channel, root string, c agent.Call, requester string, blocks []slack.Block, rec map[string][]byte) (indexed bool) {
	log := r.log.WithFields(logrus.Fields{"thread": e.Thread, "call": c.Key})
	key, decided := runner.CopiesKey(c.Key, c.Attempts), runner.DecisionKey(c)
	claims, err := r.store.ClaimValues(ctx, e.Thread, []string{permalinkKey, key, decided})
	if err != nil {
		log.WithError(err).Warn("reading the card's copies")
		return false
	}
	if v, done := claims[key]; done {
		rec[key], rec[permalinkKey] = v, claims[permalinkKey]
		return true // every copy was posted and recorded
	}
	if _, ok := claims[decided]; ok {
		// Decided before its copies went out: a click on the card,
		// handled by another replica before this one heard back from
		// Slack. A copy now would offer buttons that decide nothing;
		// none is sent, and the index says so.
		index, _, err := r.store.Claim(ctx, e.Thread, key, runner.EncodeCopies(nil))
		if err != nil {
			log.WithError(err).Warn("recording the card's copies")
			return false
		}
		log.Info("the call was decided before the card's copies were sent; none is sent")
		rec[key], rec[permalinkKey] = index, claims[permalinkKey]
		return true
	}
	link := r.threadLink(ctx, log, e.Thread, channel, root, claims)
	var posted []runner.CopyRecord
	failed := false
	post := func(to string) {
		key := runner.CopyKey(c.Key, c.Attempts, to)
		// A copy recorded already (a process died before the index was
		// written) is not posted again.
		got, err := r.store.ClaimValues(ctx, e.Thread, []string{key})
		if err != nil {
			failed = true
			log.WithField("channel", to).WithError(err).Warn("reading a copy of the card")
			return
		}
		if ts, done := got[key]; done {
			posted = append(posted, runner.CopyRecord{Channel: to, TS: string(ts)})
			return
		}
		var ts string
		if e.Again {
			// Posted, maybe, by a process that died before recording
			// it (lostcard.go).
			if ts, err = r.findCopy(ctx, to, key); err != nil {
				log.WithField("channel", to).WithError(err).Warn("looking for a copy of the card that was not recorded; posting it")
			} else if ts != "" {
				log.WithFields(logrus.Fields{"channel": to, "ts": ts}).Info("took up a copy of the card that was posted and not recorded")
			}
		}
		if ts == "" {
			ts, err = r.post(ctx, to, slack.MsgOptionText(slackui.CardText(c), false), slack.MsgOptionBlocks(slackui.CopyBlocks(channel, link, blocks)...),
				copyMeta(key))
		}
		if err != nil {
			failed = true
			log.WithField("channel", to).WithError(err).Warn("posting a copy of the card")
			return
		}
		won, _, err := r.store.Claim(ctx, e.Thread, key, []byte(ts))
		if err != nil {
			failed = true
			log.WithField("channel", to).WithError(err).Warn("recording a copy of the card")
			return
		}
		posted = append(posted, runner.CopyRecord{Channel: to, TS: string(won)})
	}
	defer func() {
		// The index lets the card's updates read its copies by key. A
		// copy that failed is left to be posted again should the card be
		// shown again, so there is no index then: updates read every
		// record, as for a card posted before copies had an index.
		if failed {
			return
		}
		index, _, err := r.store.Claim(ctx, e.Thread, key, runner.EncodeCopies(posted))
		if err != nil {
			log.WithError(err).Warn("recording the card's copies")
			return
		}
		rec[key], rec[permalinkKey], indexed = index, []byte(link), true
	}()
	if to := e.Copies.Channel; to != "" {
		post(to)
	}
	for _, user := range r.dmUsers(ctx, log, e.Copies.DM, requester) {
		var dm *slack.Channel
		err := r.retry(ctx, func() error {
			var err error
			dm, _, _, err = r.api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{user}})
			return err
		})
		if err != nil || dm == nil || dm.ID == "" {
			failed = true
			log.WithField("user", user).WithError(err).Warn("opening a direct message")
			continue
		}
		post(dm.ID)
	}
	return false // the index is written on the way out
}

// dmUsers are the users that ids name, directly or as members of user
// groups, once each, without the person who asked (who follows the
// thread), and at most maxDMs of them.
func (r *Reporter) dmUsers(ctx context.Context, log logrus.FieldLogger, ids []string, requester string) []string {
	users := r.groups.Users(ctx, ids, requester, func(group string, err error) {
		log.WithField("group", group).WithError(err).Warn("listing a user group's members: they get no direct message")
	})
	if len(users) > maxDMs {
		log.WithField("users", len(users)).Warnf("only the first %d approvers get the card by direct message", maxDMs)
		users = users[:maxDMs]
	}
	return users
}

// updateCopies redraws the recorded copies of the card of c's decision
// round attempt with blocks, as its card was.
func (r *Reporter) updateCopies(ctx context.Context, thread, channel string, c agent.Call, attempt int, blocks []slack.Block, claims map[string][]byte) {
	link := string(claims[permalinkKey])
	copies, indexed := claims[runner.CopiesKey(c.Key, attempt)]
	if !indexed {
		// A card posted before copies had an index: its copies are found
		// among all the thread's records.
		all, err := r.store.Claims(ctx, thread)
		if err != nil {
			r.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key}).WithError(err).Warn("reading the card's copies")
			return
		}
		copies = nil
		prefix := runner.CopyKey(c.Key, attempt, "")
		var found []runner.CopyRecord
		for key, ts := range all {
			if to, ok := strings.CutPrefix(key, prefix); ok && to != "" {
				found = append(found, runner.CopyRecord{Channel: to, TS: string(ts)})
			}
		}
		copies = runner.EncodeCopies(found)
	}
	for _, cp := range runner.DecodeCopies(copies) {
		err := r.update(ctx, cp.Channel, cp.TS, slack.MsgOptionText(slackui.CardText(c), false), slack.MsgOptionBlocks(slackui.CopyBlocks(channel, link, blocks)...))
		if err != nil {
			r.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key, "channel": cp.Channel}).WithError(err).Warn("updating a copy of the card")
		}
	}
}

// threadLink returns the link to the thread's root message: the one
// recorded in claims, or one asked of Slack and recorded; "" if Slack
// gives none.
func (r *Reporter) threadLink(ctx context.Context, log logrus.FieldLogger, thread, channel, root string, claims map[string][]byte) string {
	if link, ok := claims[permalinkKey]; ok {
		return string(link)
	}
	var link string
	err := r.retry(ctx, func() error {
		var err error
		link, err = r.api.GetPermalinkContext(ctx, &slack.PermalinkParameters{Channel: channel, Ts: root})
		return err
	})
	if err != nil || !slackui.Linkable(link) {
		log.WithError(err).Warn("finding the link to the thread")
		return ""
	}
	if _, _, err := r.store.Claim(ctx, thread, permalinkKey, []byte(link)); err != nil {
		log.WithError(err).Warn("recording the link to the thread")
	}
	return link
}
