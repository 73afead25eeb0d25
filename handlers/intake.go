package handlers

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackretry"
	"github.com/countersign/countersign/slackui"
)

// A request is stored before it is acknowledged. Slack does not deliver
// an acknowledged request again, so a process that dies right after
// answering must not take the request with it: the intake record, written
// in the same round trip that recognises repeated deliveries, lets any
// process carry it on. The record goes from accepted (scheduled to be
// driven again after intakeRetry) to started (its conversation has a
// checkpoint, or its reply was handed to the runner); RunIntake drives
// again whatever is still accepted when its time comes.
//
// A request is carried on by one attempt at a time, in this process and
// across replicas. The attempt that accepted it holds it, with a token;
// the hold lasts intakeRetry and RunIntake renews the holds of this
// process's attempts, queued or running, on every tick, so a request
// that waits long for a free slot is not driven again beside itself.
// Only a hold that lapsed — its process died or stalled — lets another
// attempt take the request, under a new token. Each step with an effect
// is conditional on the token: the record's "posting" and root are
// written only while it holds the request, and the conversation is
// started or the reply handed on only while the hold is known to last: it
// was taken or renewed less than postTimeout ago, or is renewed first. An
// attempt that lost the request stops, and the one that has it finds a
// root message already posted by its metadata (postRoot).

// intakeRetry is how long an accepted request's hold lasts unless its
// holder renews it: how long a process that died may leave it before
// another process (or this one) drives it again.
const intakeRetry = 15 * time.Second

// postTimeout bounds the post of a root message, well within the hold
// renewed just before it: an attempt whose hold lapses is not still
// posting when another attempt looks for the message. A hold taken or
// renewed less than postTimeout ago lasts twice as long again at least,
// and is counted on without asking the store (holds).
const postTimeout = intakeRetry / 3

// Kinds of accepted requests.
const (
	intakeCommand = "command" // /agent: post the root message, then start
	intakeMention = "mention" // @Countersign in a channel: start in its thread
	intakeReply   = "reply"   // a message in a conversation's thread
)

// intake is an accepted request, as stored.
type intake struct {
	Kind    string `json:"kind"`
	Team    string `json:"team"`
	Channel string `json:"channel"`
	User    string `json:"user"`
	// Text is the request as the model is to read it.
	Text string `json:"text"`
	// Typed is what the person typed, for the root message.
	Typed string `json:"typed,omitempty"`
	// Root is the thread's root ts: the mention's or reply's thread, or
	// the command's root message once it is posted.
	Root string `json:"root,omitempty"`
	// TS is the message's own ts (events).
	TS string `json:"ts,omitempty"`
	// ResponseURL is a slash command's response_url: it reaches the
	// person even where the bot cannot post.
	ResponseURL string `json:"response_url,omitempty"`
	// Posting says a command's root message may have been posted
	// without its ts being recorded: look for it before posting again.
	Posting bool `json:"posting,omitempty"`
}

// accept stores rec under id, held by a new token, and reports the hold
// and whether the request is new. An error means the request cannot be
// taken now.
func (s *Server) accept(ctx context.Context, id string, rec intake) (h hold, first bool, err error) {
	raw, err := json.Marshal(rec)
	if err != nil {
		return hold{}, false, err
	}
	h = hold{token: rand.Text(), until: s.opts.Now().Add(intakeRetry)}
	first, err = s.store.Accept(ctx, id, h.token, raw, h.until, dedupTTL)
	return h, first, err
}

// hold is an attempt's hold of a request: its token, and until when the
// store holds the request for it at least.
type hold struct {
	token string
	until time.Time
}

// heldRequests are the requests this process's attempts hold, queued or
// running: id to token. It is safe for concurrent use.
type heldRequests struct{ m sync.Map }

// add records that an attempt of this process holds id under token. If
// one does already, it now holds id under token, and add reports false:
// no second attempt is to be started.
func (h *heldRequests) add(id, token string) bool {
	_, had := h.m.Swap(id, token)
	return !had
}

// token is the token under which this process holds id.
func (h *heldRequests) token(id string) string {
	v, _ := h.m.Load(id)
	token, _ := v.(string)
	return token
}

func (h *heldRequests) remove(id string) { h.m.Delete(id) }

// all returns a copy of the holds.
func (h *heldRequests) all() map[string]string {
	out := map[string]string{}
	h.m.Range(func(id, token any) bool { out[id.(string)] = token.(string); return true })
	return out
}

// carryOn drives an accepted request on, in the background, as the
// attempt that holds it as h: it posts a command's root message
// unless that was done, starts the conversation or hands the reply to
// the runner, and records that the request started. If an attempt of
// this process has the request already, that attempt goes on under
// h's token and no other is started. It is safe to run again for the same
// request: an attempt that no longer holds it stops.
func (s *Server) carryOn(ctx context.Context, id string, h hold, rec intake) {
	if !s.held.add(id, h.token) {
		return
	}
	s.background(ctx, func(ctx context.Context) {
		defer s.held.remove(id)
		log := s.log.WithFields(logrus.Fields{"team": rec.Team, "channel": rec.Channel, "user": rec.User, "request": rec.Kind})
		// The request may have waited for a slot: go on only if this
		// attempt still holds it.
		if held, err := s.holds(ctx, id, &h, log); err != nil || !held {
			return
		}
		if s.carry(ctx, id, &h, rec, log) {
			if err := s.store.Started(ctx, id, s.held.token(id)); err != nil {
				log.WithError(err).Warn("recording that a request started")
			}
		}
	})
}

// holds reports whether this process's attempt still has request id:
// at once if h, its hold, is fresh (see postTimeout), else by renewing
// it, and h with it. An error says nothing: the request is driven again
// once the hold lapses.
func (s *Server) holds(ctx context.Context, id string, h *hold, log logrus.FieldLogger) (bool, error) {
	token, now := s.held.token(id), s.opts.Now()
	if token == h.token && h.until.Sub(now) > intakeRetry-postTimeout {
		return true, nil
	}
	until := now.Add(intakeRetry)
	held, err := s.store.HoldIntake(ctx, map[string]string{id: token}, until)
	if held[id] {
		*h = hold{token: token, until: until}
	}
	if err != nil {
		log.WithError(err).Warn("renewing the hold of a request; it is driven again later")
		return false, err
	}
	if !held[id] {
		log.Info("the request is carried on by another attempt, or started")
	}
	return held[id], nil
}

// carry does the request's work and reports whether it is settled (done,
// failed for good, or no longer this attempt's); false leaves it to be
// driven again.
func (s *Server) carry(ctx context.Context, id string, h *hold, rec intake, log logrus.FieldLogger) bool {
	if rec.Kind == intakeCommand && rec.Root == "" {
		if settled, posted := s.postRoot(ctx, id, &rec, log); !posted {
			return settled
		}
	}
	thread := slackui.ThreadKey(rec.Team, rec.Channel, rec.Root)
	log = log.WithField("thread", thread)
	owned := false
	if rec.Kind == intakeMention {
		var err error
		owned, err = s.owns(ctx, thread)
		if err != nil {
			log.WithError(err).Warn("reading the thread; the request stays due and is tried again")
			return false
		}
	}
	// The last step has an effect that must not happen twice (a reply
	// handed on twice is two turns): go on only while this attempt
	// holds the request, its hold fresh or renewed for the step.
	switch held, err := s.holds(ctx, id, h, log); {
	case err != nil:
		return false
	case !held:
		return true
	}
	if rec.Kind == intakeMention {
		switch {
		case owned:
			rec.Kind = intakeReply // a mention in a conversation's thread
		case rec.Text == "":
			s.ephemeral(ctx, rec.Channel, rec.Root, rec.User, slackui.HelpText)
			return true
		}
	}
	// A reply goes to the runner, which tells a thread that is not a
	// conversation (ErrNoThread) from one whose first checkpoint is
	// still being written.
	if rec.Kind == intakeReply {
		return s.reply(ctx, rec.Team, thread, messageEvent{User: rec.User, Channel: rec.Channel, TS: rec.TS, ThreadTS: rec.Root}, rec.Text, log)
	}
	err := s.svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: rec.User, Team: rec.Team, Channel: rec.Channel, Text: rec.Text, TS: rec.TS})
	switch {
	case err == nil:
		return true
	case errors.Is(err, runner.ErrThreadExists):
		log.Info("conversation already started")
		return true
	case errors.Is(err, runner.ErrBusy):
		return false // another process is starting it
	case errors.Is(err, runner.ErrLeaseLost):
		log.WithError(err).Warn("starting a conversation; nothing was saved, the request stays due and is tried again")
		return false
	}
	log.WithError(err).Error("starting a conversation")
	s.ephemeral(ctx, rec.Channel, rec.Root, rec.User, slackui.TextTryAgain)
	return false
}

// requestMetadata is the event type of the metadata a root message
// carries: the id of the request it was posted for.
const requestMetadata = "countersign_request"

// postRoot posts a command's root message and records its ts in rec. It
// reports whether the message is there (posted) and, when it is not,
// whether the request is settled (the person was told why) rather than
// left to be driven again.
//
// A root message is posted once per request, also when a process dies
// between posting it and recording it: the intake says "posting" before
// the post, the message carries the request's id in its metadata, and a
// later attempt that finds "posting" looks for that message in the
// channel before it posts. Two attempts never post at once: "posting" is
// written only by the attempt that holds the request, which renews its
// hold with it and posts within postTimeout, well before the hold could
// lapse.
func (s *Server) postRoot(ctx context.Context, id string, rec *intake, log logrus.FieldLogger) (settled, posted bool) {
	if rec.Posting {
		ts, err := s.findRoot(ctx, rec.Channel, id)
		var slackErr slack.SlackErrorResponse
		switch {
		case ts != "":
			rec.Root = ts
			held, err := s.recordIntake(ctx, id, *rec, log, "recording the root message")
			if err == nil && !held {
				return true, false // another attempt has it, and the root
			}
			return false, true
		case errors.As(err, &slackErr):
			// Slack answered, and will not show the channel (no
			// history scope): post, at the risk of a second root.
			log.WithError(err).Warn("looking for the request's root message; posting it")
		case err != nil:
			log.WithError(err).Warn("looking for the request's root message; trying again later")
			return false, false
		}
	}
	// "posting" is written, or written again, by the holder only: it
	// renews the hold for the post.
	rec.Posting = true
	switch held, err := s.recordIntake(ctx, id, *rec, log, "recording that the root message is being posted"); {
	case err != nil:
		return false, false
	case !held:
		return true, false // another attempt has the request
	}
	pctx, cancel := context.WithTimeout(ctx, postTimeout)
	_, ts, err := s.api.PostMessageContext(pctx, rec.Channel,
		slack.MsgOptionText(fmt.Sprintf("<@%s> asked: %s", rec.User, slackui.MrkdwnAsSent(rec.Typed)), false),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: requestMetadata, EventPayload: map[string]any{"request": id}}))
	cancel()
	switch {
	case err == nil:
	case slackretry.Refused(err):
		// Slack answered: the bot cannot post here.
		log.WithError(err).Warn("posting the request's root message")
		s.tell(ctx, rec.Channel, "", rec.User, rec.ResponseURL, slackui.CantPostText(err))
		return true, false
	default:
		// Rate limited, or no answer: the message may be posted; the
		// next attempt looks for it first.
		log.WithError(err).Warn("posting the request's root message; trying again later")
		return false, false
	}
	rec.Root = ts
	if held, err := s.recordIntake(ctx, id, *rec, log, "recording the root message"); err == nil && !held {
		return true, false // the hold lapsed during the post; the new holder finds the root
	}
	return false, true
}

// findRoot looks for the root message posted for request id among the
// channel's latest messages: its ts, or "" if there is none.
func (s *Server) findRoot(ctx context.Context, channel, id string) (string, error) {
	hist, err := s.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
		ChannelID: channel, Limit: 200, IncludeAllMetadata: true,
	})
	if err != nil {
		return "", err
	}
	for _, m := range hist.Messages {
		if m.Metadata.EventType == requestMetadata && m.Metadata.EventPayload["request"] == id && m.BotID != "" {
			return m.Timestamp, nil
		}
	}
	return "", nil
}

// recordIntake replaces the stored record of request id with rec, and
// renews the hold, if this process's attempt still holds the request; it
// reports whether it does.
func (s *Server) recordIntake(ctx context.Context, id string, rec intake, log logrus.FieldLogger, what string) (bool, error) {
	raw, err := json.Marshal(rec)
	held := false
	if err == nil {
		held, err = s.store.UpdateIntake(ctx, id, s.held.token(id), raw, s.opts.Now().Add(intakeRetry))
	}
	switch {
	case err != nil:
		log.WithError(err).Warn(what)
	case !held:
		log.Info("the request is carried on by another attempt, or started")
	}
	return held, err
}

// RunIntake drives again, every interval until ctx ends, the accepted
// requests whose hold has lapsed: those of a process that died (or
// stalled) between acknowledging them and starting their conversation.
// First, on each tick, it renews the holds of this process's attempts,
// queued or running, so that none of them is taken for lapsed.
func (s *Server) RunIntake(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var renewed time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.opts.Now()
		if now.Sub(renewed) >= intakeRetry/3 {
			if held := s.held.all(); len(held) > 0 {
				if _, err := s.store.HoldIntake(ctx, held, now.Add(intakeRetry)); err != nil {
					s.log.WithError(err).Warn("renewing the holds of queued and running requests")
				}
			}
			renewed = now
		}
		token := rand.Text()
		due, err := s.store.DueIntake(ctx, token, now, now.Add(intakeRetry), 50)
		if err != nil {
			s.log.WithError(err).Warn("reading accepted requests")
		}
		for id, raw := range due {
			var rec intake
			if err := json.Unmarshal(raw, &rec); err != nil {
				s.log.WithError(err).WithField("request", id).Warn("an accepted request cannot be read; dropping it")
				_ = s.store.Started(ctx, id, token)
				continue
			}
			s.log.WithFields(logrus.Fields{"request": rec.Kind, "channel": rec.Channel}).Info("carrying on a request accepted earlier")
			s.carryOn(ctx, id, hold{token: token, until: now.Add(intakeRetry)}, rec)
		}
	}
}
