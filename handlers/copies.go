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
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
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
func (r *Reporter) WithGroups(g *Groups) *Reporter {
	r.groups = g
	return r
}

// postCopies posts the copies of c's card that e asks for, and records
// each; a copy recorded already (the card shown again after a crash) is
// not posted again. Failures are logged: the card in the thread stands.
func (r *Reporter) postCopies(ctx context.Context, e runner.Event, channel, root string, c agent.Call, requester string, blocks []slack.Block) {
	log := r.logger().WithFields(logrus.Fields{"thread": e.Thread, "call": c.Key})
	claims, err := r.store.Claims(ctx, e.Thread)
	if err != nil {
		log.WithError(err).Warn("reading the card's copies")
		return
	}
	link := r.threadLink(ctx, log, e.Thread, channel, root, claims)
	post := func(to string) {
		key := runner.CopyKey(c.Key, c.Attempts, to)
		if _, done := claims[key]; done {
			return
		}
		ts, err := r.post(ctx, to, slack.MsgOptionText(slackui.CardText(c), false), slack.MsgOptionBlocks(slackui.CopyBlocks(channel, link, blocks)...))
		if err != nil {
			log.WithField("channel", to).WithError(err).Warn("posting a copy of the card")
			return
		}
		if _, _, err := r.store.Claim(ctx, e.Thread, key, []byte(ts)); err != nil {
			log.WithField("channel", to).WithError(err).Warn("recording a copy of the card")
		}
	}
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
			log.WithField("user", user).WithError(err).Warn("opening a direct message")
			continue
		}
		post(dm.ID)
	}
}

// dmUsers are the users that ids name, directly or as members of user
// groups, once each, without the person who asked (who follows the
// thread), and at most maxDMs of them.
func (r *Reporter) dmUsers(ctx context.Context, log logrus.FieldLogger, ids []string, requester string) []string {
	var users []string
	add := func(u string) {
		if u != requester && !slices.Contains(users, u) {
			users = append(users, u)
		}
	}
	for _, id := range ids {
		if !tools.IsGroupID(id) {
			add(id)
			continue
		}
		if r.groups == nil {
			log.WithField("group", id).Warn("no user-group lookup: the group's members get no direct message")
			continue
		}
		members, err := r.groups.Members(ctx, id)
		if err != nil {
			log.WithField("group", id).WithError(err).Warn("listing a user group's members")
			continue
		}
		for _, u := range members {
			add(u)
		}
	}
	if len(users) > maxDMs {
		log.WithField("users", len(users)).Warnf("only the first %d approvers get the card by direct message", maxDMs)
		users = users[:maxDMs]
	}
	return users
}

// updateCopies redraws the recorded copies of the card of c's decision
// round attempt with blocks, as its card was.
func (r *Reporter) updateCopies(ctx context.Context, thread, channel string, c agent.Call, attempt int, blocks []slack.Block, claims map[string][]byte) {
	prefix := runner.CopyKey(c.Key, attempt, "")
	link := string(claims[permalinkKey])
	for key, ts := range claims {
		to, ok := strings.CutPrefix(key, prefix)
		if !ok || to == "" {
			continue
		}
		err := r.retry(ctx, func() error {
			_, _, _, err := r.api.UpdateMessageContext(ctx, to, string(ts),
				slack.MsgOptionText(slackui.CardText(c), false), slack.MsgOptionBlocks(slackui.CopyBlocks(channel, link, blocks)...))
			return err
		})
		if err != nil {
			r.logger().WithFields(logrus.Fields{"thread": thread, "call": c.Key, "channel": to}).WithError(err).Warn("updating a copy of the card")
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
