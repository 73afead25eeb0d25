package handlers

import (
	"context"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/slackui"
)

// A card is posted, then its ts recorded (recordCard). A process that
// dies between the two — or loses Slack's answer to the post — leaves a
// card in the thread that nobody knows of: whoever shows the call again
// would post a second card, and whoever decides it would find no card to
// redraw, so the first would go on showing live buttons after the call
// was decided and run. The same holds, for a moment, for a card whose
// answer is on its way: Slack shows a posted message before its poster
// hears back, and an approver may click it, on another replica, first.
//
// So a card carries, in its message metadata, the key of its decision
// round, and a card that has no record is looked for in the thread
// before one is posted again (runner.Event.Again) or given up on
// redrawing: the card found, if this bot posted it, is recorded as the
// round's card and redrawn. A copy of a card (copies.go) carries the key
// it is recorded under, and is looked for likewise, among the latest
// messages of its channel or direct message, before it is posted again.
// Only a message of this bot's own counts: another app can post metadata
// of any kind, and a card of its making would show nothing of the call
// (its buttons are that app's).

// cardMetadata is the event type of a card's metadata: its round's key
// (cardKey) under "card".
const cardMetadata = "countersign_card"

// cardMeta is the message metadata of the card of key.
func cardMeta(key string) slack.MsgOption {
	return slack.MsgOptionMetadata(slack.SlackMetadata{EventType: cardMetadata, EventPayload: map[string]any{"card": key}})
}

// copyMeta is the message metadata of the copy of a card recorded under
// key (runner.CopyKey).
func copyMeta(key string) slack.MsgOption {
	return slack.MsgOptionMetadata(slack.SlackMetadata{EventType: cardMetadata, EventPayload: map[string]any{"copy": key}})
}

// maxCardPages bounds the pages of 200 messages read of a thread to
// find a card: the card of a thread longer than that is not found, and
// is posted again as before. Replies come oldest first, and the bot's
// clock and Slack's need not agree closely enough to start the search
// at the round's time.
const maxCardPages = 10

// findCards looks in the thread (channel, root) for the cards of keys
// that this bot posted, and returns the ts of each one found; Slack's
// error if it does not show the thread. Without the bot's ID
// (WithBotID), it finds none.
func (r *Reporter) findCards(ctx context.Context, channel, root string, keys ...string) (map[string]string, error) {
	if r.botID == "" || root == "" {
		return nil, nil
	}
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	params := &slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: root, Limit: 200, IncludeAllMetadata: true}
	found := map[string]string{}
	for range maxCardPages {
		var msgs []slack.Message
		var more bool
		var next string
		err := r.retry(ctx, func() (err error) {
			msgs, more, next, err = r.api.GetConversationRepliesContext(ctx, params)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			key, _ := m.Metadata.EventPayload["card"].(string)
			if m.Metadata.EventType != cardMetadata || !want[key] || m.BotID != r.botID || m.Timestamp == "" {
				continue
			}
			if _, dup := found[key]; !dup {
				found[key] = m.Timestamp // the first posted: the oldest
			}
		}
		if !more || next == "" {
			break
		}
		params.Cursor = next
	}
	return found, nil
}

// adoptCard finds, for c, a call that needs approval and whose card has
// no record, a card of its decision round attempt, or of an earlier
// round down to low (an attempt that follows a pause for input has no
// card of its own), that this bot posted and did not record, and records
// it. It returns the records as stored and the round whose card they
// hold; nil if it found none. A card found where another was recorded
// meanwhile is removed: nothing would redraw it.
func (r *Reporter) adoptCard(ctx context.Context, thread, channel string, c agent.Call, attempt, low int) (map[string][]byte, int) {
	_, _, root, err := slackui.ParseThread(thread)
	if err != nil {
		return nil, 0
	}
	keys := make([]string, 0, attempt-low+1)
	for a := attempt; a >= low; a-- {
		keys = append(keys, cardKey(c.Key, a))
	}
	log := r.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key})
	found, err := r.findCards(ctx, channel, root, keys...)
	if err != nil {
		log.WithError(err).Warn("looking for a card that was not recorded")
		return nil, 0
	}
	for a := attempt; a >= low; a-- {
		ts, ok := found[cardKey(c.Key, a)]
		if !ok {
			continue
		}
		rec, err := r.recordCard(ctx, thread, map[string][]byte{cardKey(c.Key, a): []byte(ts)})
		if err != nil {
			return nil, 0
		}
		if won := rec[cardKey(c.Key, a)]; string(won) != ts {
			r.removeCard(ctx, thread, channel, ts)
		} else {
			log.WithField("ts", ts).Info("took up a card that was posted and not recorded")
		}
		return rec, a
	}
	return nil, 0
}

// maxCopyLookback is how many of a channel's latest messages are read
// to find a copy of a card: copies are posted at the top level of a
// direct message or a notify channel, newest first in its history.
const maxCopyLookback = 200

// findCopy looks among channel's latest messages for the copy of a card
// recorded under key that this bot posted: its ts, or "" if there is
// none (or the bot's ID is unknown).
func (r *Reporter) findCopy(ctx context.Context, channel, key string) (string, error) {
	if r.botID == "" {
		return "", nil
	}
	var hist *slack.GetConversationHistoryResponse
	err := r.retry(ctx, func() (err error) {
		hist, err = r.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
			ChannelID: channel, Limit: maxCopyLookback, IncludeAllMetadata: true,
		})
		return err
	})
	if err != nil {
		return "", err
	}
	for _, m := range hist.Messages {
		if m.Metadata.EventType == cardMetadata && m.Metadata.EventPayload["copy"] == key && m.BotID == r.botID && m.Timestamp != "" {
			return m.Timestamp, nil
		}
	}
	return "", nil
}
