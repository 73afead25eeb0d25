package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/runner"
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

// intakeRetry is how long an accepted request may take to start before
// another process (or this one) drives it again.
const intakeRetry = 15 * time.Second

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

// accept stores rec under id and reports whether it is new. An error
// means the request cannot be taken now.
func (s *Server) accept(ctx context.Context, id string, rec intake) (bool, error) {
	raw, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	return s.store.Accept(ctx, id, raw, s.opts.Now().Add(intakeRetry), dedupTTL)
}

// carryOn drives an accepted request on, in the background: it posts a
// command's root message unless that was done, starts the conversation or
// hands the reply to the runner, and records that the request started.
// It is safe to run again for the same request.
func (s *Server) carryOn(ctx context.Context, id string, rec intake) {
	s.background(ctx, func(ctx context.Context) {
		log := s.log.WithFields(logrus.Fields{"team": rec.Team, "channel": rec.Channel, "user": rec.User, "request": rec.Kind})
		if s.carry(ctx, id, rec, log) {
			if err := s.store.Started(ctx, id); err != nil {
				log.WithError(err).Warn("recording that a request started")
			}
		}
	})
}

// carry does the request's work and reports whether it is settled (done,
// or failed for good); false leaves it to be driven again.
func (s *Server) carry(ctx context.Context, id string, rec intake, log logrus.FieldLogger) bool {
	if rec.Kind == intakeCommand && rec.Root == "" {
		if settled, posted := s.postRoot(ctx, id, &rec, log); !posted {
			return settled
		}
	}
	thread := ThreadKey(rec.Team, rec.Channel, rec.Root)
	log = log.WithField("thread", thread)
	if rec.Kind == intakeMention {
		owned, err := s.owns(ctx, thread)
		if err != nil {
			log.WithError(err).Warn("reading the thread; the request stays due and is tried again")
			return false
		}
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
	err := s.svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: rec.User, Team: rec.Team, Channel: rec.Channel, Text: rec.Text})
	switch {
	case err == nil:
		return true
	case errors.Is(err, runner.ErrThreadExists):
		log.Info("conversation already started")
		return true
	case errors.Is(err, runner.ErrBusy):
		return false // another process is starting it
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
// channel before it posts.
func (s *Server) postRoot(ctx context.Context, id string, rec *intake, log logrus.FieldLogger) (settled, posted bool) {
	if rec.Posting {
		ts, err := s.findRoot(ctx, rec.Channel, id)
		var slackErr slack.SlackErrorResponse
		switch {
		case ts != "":
			rec.Root = ts
			s.recordIntake(ctx, id, *rec, log, "recording the root message")
			return false, true
		case errors.As(err, &slackErr):
			// Slack answered, and will not show the channel (no
			// history scope): post, at the risk of a second root.
			log.WithError(err).Warn("looking for the request's root message; posting it")
		case err != nil:
			log.WithError(err).Warn("looking for the request's root message; trying again later")
			return false, false
		}
	} else {
		rec.Posting = true
		if err := s.recordIntake(ctx, id, *rec, log, "recording that the root message is being posted"); err != nil {
			return false, false
		}
	}
	_, ts, err := s.api.PostMessageContext(ctx, rec.Channel,
		slack.MsgOptionText(fmt.Sprintf("<@%s> asked: %s", rec.User, slackui.MrkdwnAsSent(rec.Typed)), false),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: requestMetadata, EventPayload: map[string]any{"request": id}}))
	if err != nil && !slackRefused(err) {
		// Slack gave no answer about the post (rate limited, a transient
		// error, a broken connection — the message may even be there):
		// the request stays due, and its next attempt looks for the
		// message before posting.
		log.WithError(err).Warn("posting the request's root message; trying again later")
		return false, false
	}
	if err != nil {
		log.WithError(err).Warn("posting the request's root message")
		s.tell(ctx, rec.Channel, "", rec.User, rec.ResponseURL, slackui.CantPostText(err))
		return true, false
	}
	rec.Root = ts
	s.recordIntake(ctx, id, *rec, log, "recording the root message")
	return false, true
}

// slackRefused reports whether err is Slack's definite refusal of a
// request (ok:false with an error code that will not change by asking
// again), rather than no answer: a rate limit, a server error, a broken
// connection.
func slackRefused(err error) bool {
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

// recordIntake replaces the stored record of request id with rec.
func (s *Server) recordIntake(ctx context.Context, id string, rec intake, log logrus.FieldLogger, what string) error {
	raw, err := json.Marshal(rec)
	if err == nil {
		err = s.store.UpdateIntake(ctx, id, raw)
	}
	if err != nil {
		log.WithError(err).Warn(what)
	}
	return err
}

// RunIntake drives again, every interval until ctx ends, the accepted
// requests whose time has come: those of a process that died between
// acknowledging them and starting their conversation.
func (s *Server) RunIntake(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.opts.Now()
		due, err := s.store.DueIntake(ctx, now, now.Add(intakeRetry), 50)
		if err != nil {
			s.log.WithError(err).Warn("reading accepted requests")
		}
		for id, raw := range due {
			var rec intake
			if err := json.Unmarshal(raw, &rec); err != nil {
				s.log.WithError(err).WithField("request", id).Warn("an accepted request cannot be read; dropping it")
				_ = s.store.Started(ctx, id)
				continue
			}
			s.log.WithFields(logrus.Fields{"request": rec.Kind, "channel": rec.Channel}).Info("carrying on a request accepted earlier")
			s.carryOn(ctx, id, rec)
		}
	}
}
