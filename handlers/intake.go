package handlers

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackfiles"
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
//
// A reply that the runner keeps until its conversation's first save
// (runner.ErrKept) is neither started nor held: its attempt lets go of
// it until the kept reply would expire (keptReply), and the start, once
// that save is made, has it taken by a new attempt (carryKept) — or, if
// the start's process died, DueIntake gives it to one when it is due.

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
	// Files are the files attached to the message (events). Only their
	// references are stored: the attempt that hands the request on
	// downloads the images among them (attachments), and the
	// conversation's checkpoint keeps them.
	Files []slackfiles.File `json:"files,omitempty"`
	// KeptUntil (unix ms) says a reply was kept until its
	// conversation's first save (runner.ErrKept): it stays due until the
	// start carries it on (carryKept), or until then, when the kept
	// reply has expired.
	KeptUntil int64 `json:"kept_until,omitempty"`
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
		log := s.log.WithFields(logrus.Fields{"team": rec.Team, "channel": rec.Channel, "user": rec.User, "request": rec.Kind})
		// The request may have waited for a slot: go on only if this
		// attempt still holds it.
		if held, err := s.holds(ctx, id, &h, log); err != nil || !held {
			s.held.remove(id)
			return
		}
		// A step that failed on the store is tried again by this
		// attempt, soon, while it holds the request: a failover or a
		// dropped link is over in seconds, and the person who wrote
		// is answered then, not once the hold lapsed and the intake
		// looked again. carry checks the hold before the step that
		// must not happen twice, as on the first attempt.
		//
		// A try that fails logs a warning the first time; the tries
		// after it log at info, with their number (attempt), so that a
		// failover of seconds is a warning per request, not one per try.
		// The last says whether the request was carried on or left due.
		first := time.Now()
		deadline := first.Add(intakeRetry)
		try := log
		for n, backoff := 1, carryAgainFrom; ; n, backoff = n+1, min(2*backoff, carryAgainUpTo) {
			switch s.carry(ctx, id, &h, rec, try) {
			case settled:
				s.started(ctx, id, log)
				if n > 1 {
					log.WithFields(logrus.Fields{"attempts": n, "took": time.Since(first).Round(time.Millisecond).String()}).
						Info("the request was carried on after its step failed")
				}
			case letGo:
				return // the attempt let go of the request (keptReply)
			case again:
				if time.Now().Add(backoff).Before(deadline) && s.pause(backoff) {
					try = log.WithField(attemptField, n+1)
					continue
				}
				if n > 1 {
					log.WithFields(logrus.Fields{"attempts": n, "took": time.Since(first).Round(time.Millisecond).String()}).
						Warn("the request's step still fails; it stays due, and is driven again once its hold lapses")
				}
			}
			break
		}
		s.held.remove(id)
	})
}

// attemptField is the field of an attempt's tries after its first
// (carryOn): warnFirst logs their failures at info.
const attemptField = "attempt"

// warnFirst logs msg, with err, as a warning, or at info on a try after
// an attempt's first (log has attemptField): carryOn has warned of the
// first, and says how the tries ended.
func warnFirst(log logrus.FieldLogger, err error, msg string) {
	e := log.WithError(err)
	if _, again := e.Data[attemptField]; again {
		e.Info(msg)
		return
	}
	e.Warn(msg)
}

// How soon an attempt tries again a request whose step failed on the
// store (again): from carryAgainFrom, doubling up to carryAgainUpTo,
// within intakeRetry of its first try, and not once the server shuts
// down (the request stays due for the intake of a process that goes on).
const (
	carryAgainFrom = 100 * time.Millisecond
	carryAgainUpTo = 2 * time.Second
)

// pause waits for d, and reports false if the server began to shut
// down first.
func (s *Server) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.quit:
		return false
	case <-t.C:
		return true
	}
}

// started records that request id, which this process's attempt holds,
// started: it is not to be driven again. A Started that fails — with
// replicas to wait for (REDIS_WAIT_REPLICAS), one they did not
// acknowledge — is sent again until it is made, for as long as a hold
// lasts (intakeRetry): a failover meanwhile leaves the new master with
// the request held by this attempt (the take or renewal of the hold was
// acknowledged before the request was carried on), and the Started sent
// again is made there, before that hold lapses and the intake carries
// the request on a second time.
func (s *Server) started(ctx context.Context, id string, log logrus.FieldLogger) {
	deadline := time.Now().Add(intakeRetry)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		err := s.store.Started(ctx, id, s.held.token(id))
		if err == nil {
			return
		}
		if ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			log.WithError(err).Warn("recording that a request started; it may be carried on again")
			return
		}
		log.WithError(err).Info("recording that a request started; sending it again")
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// What an attempt did with its request.
type carried int

const (
	// due: the request is driven again once its hold lapses.
	due carried = iota
	// settled: done, failed for good, or no longer this attempt's.
	settled
	// letGo: the attempt let go of the request, which stays due (a
	// reply kept until its conversation's first save).
	letGo
	// again: a step failed on the store (or a look-up the decision
	// needs): the request stays due, and this attempt tries it again
	// soon while it holds it (carryOn).
	again
)

func settledIf(ok bool) carried {
	if ok {
		return settled
	}
	return due
}

// keptReply lets go of request id, a reply that Reply kept until its
// conversation's first save (runner.ErrKept), as the attempt that holds
// it under token: the reply is not settled, and nobody holds it until
// the intake looks at it again (keptLook: within minutes, and when the
// kept reply would have expired, rec.KeptUntil, at the latest), which
// carries it on if the start's process died; the start carries it on as
// soon as its first save is made (carryKept). It reports again if the
// reply is to be asked again now, by this attempt: the start asked for
// it while this attempt held it, or another attempt of this process took
// it over.
//
// Asked again because the start asked for it, the attempt goes on under
// its hold, renewed with the let-go's step and recorded in h: a hold
// left to lapse meanwhile would give the reply to another replica's
// intake too, and both would hand it on.
func (s *Server) keptReply(ctx context.Context, id, token string, h *hold, rec intake, log logrus.FieldLogger) (again bool) {
	raw, err := json.Marshal(rec)
	if err != nil {
		log.WithError(err).Warn("keeping a reply due until its conversation starts")
		return false
	}
	now := s.opts.Now()
	until := now.Add(intakeRetry)
	let, goOn, err := s.store.LetGoIntake(ctx, id, token, raw, keptLook(now, time.UnixMilli(rec.KeptUntil)), until)
	switch {
	case err != nil:
		// The hold lapses as it would have: the reply is asked again.
		log.WithError(err).Warn("keeping a reply due until its conversation starts")
	case goOn:
		*h = hold{token: token, until: until}
		return true
	case !let:
		log.Info("the request is carried on by another attempt, or started")
	}
	// Nothing holds the request for this attempt now; an attempt of
	// this process that took it over meanwhile is this one, and asks
	// again.
	return !s.held.m.CompareAndDelete(id, token)
}

// keptLookFirst is how long a kept reply's request stays let go before
// the intake first looks at it again: beyond most starts' first answer,
// so that the start carries the reply on itself, and short enough that
// a reply whose start died after its first save is answered minutes
// later, not at the end of its kept time.
const keptLookFirst = 2 * time.Minute

// keptLook is when the intake looks again at a kept reply's request let
// go at now, kept until "until": as long after now as it has been kept
// already (keptLookFirst at least), and at until at the latest. A reply
// in a thread that never becomes a conversation is looked at four times
// in its kept time (at 2, 4, 8 and 15 minutes); one whose start died is
// answered at the next look.
func keptLook(now, until time.Time) time.Time {
	kept := now.Sub(until.Add(-runner.KeptReplyTTL))
	return minTime(now.Add(max(kept, keptLookFirst)), until)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// carryKept carries on replies that Reply kept until their
// conversation's first save, now that it is made: each one's request,
// let go by its attempt (keptReply), is taken by a new attempt and
// driven through the reply path as any reply, so that its author is
// answered. A request still held is marked, and its attempt asks again
// instead of letting go; one taken by the intake meanwhile, or started
// (another attempt applied the reply), is left alone. It is the
// runner's KeptCarrier.
func (s *Server) carryKept(ctx context.Context, replies []runner.Message) {
	for _, m := range replies {
		if m.Ref == "" {
			continue
		}
		log := s.log.WithFields(logrus.Fields{"thread": m.Thread, "user": m.By})
		h := hold{token: rand.Text(), until: s.opts.Now().Add(intakeRetry)}
		raw, err := s.store.TakeIntake(ctx, m.Ref, h.token, h.until)
		if err != nil {
			// It stays due, and the intake carries it on later.
			log.WithError(err).Warn("carrying on a reply kept while its conversation started")
			continue
		}
		if raw == nil {
			continue
		}
		var rec intake
		if err := json.Unmarshal(raw, &rec); err != nil {
			log.WithError(err).Warn("a kept reply's request cannot be read")
			continue
		}
		if rec.KeptUntil == 0 {
			// Taken before its attempt recorded that it was kept.
			rec.KeptUntil = s.opts.Now().Add(runner.KeptReplyTTL).UnixMilli()
		}
		s.carryOn(ctx, m.Ref, h, rec)
	}
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
		warnFirst(log, err, "renewing the hold of a request; it is driven again later")
		return false, err
	}
	if !held[id] {
		log.Info("the request is carried on by another attempt, or started")
	}
	return held[id], nil
}

// carry does the request's work and reports whether it is settled (done,
// failed for good, or no longer this attempt's), left to be driven
// again, or let go.
func (s *Server) carry(ctx context.Context, id string, h *hold, rec intake, log logrus.FieldLogger) carried {
	if rec.Kind == intakeCommand && rec.Root == "" {
		if ok, posted := s.postRoot(ctx, id, &rec, log); !posted {
			return settledIf(ok)
		}
	}
	thread := slackui.ThreadKey(rec.Team, rec.Channel, rec.Root)
	log = log.WithField("thread", thread)
	owned := false
	if rec.Kind == intakeMention {
		var err error
		owned, err = s.owns(ctx, thread)
		if err != nil {
			warnFirst(log, err, "reading the thread; the request stays due and is tried again")
			return again
		}
	}
	// The attached images are downloaded before the hold is looked at,
	// so that a slow download does not outlast the hold the hand-on
	// counts on. An attempt that loses the request meanwhile downloaded
	// for nothing; only the one that hands it on puts them in a
	// conversation.
	text, images := s.attachments(ctx, rec, log)
	// The last step has an effect that must not happen twice (a reply
	// handed on twice is two turns): go on only while this attempt
	// holds the request, its hold fresh or renewed for the step.
	switch held, err := s.holds(ctx, id, h, log); {
	case err != nil:
		return again
	case !held:
		return settled
	}
	if rec.Kind == intakeMention {
		switch {
		case owned:
			rec.Kind = intakeReply // a mention in a conversation's thread
		case rec.Text == "" && len(rec.Files) == 0:
			s.ephemeral(ctx, rec.Channel, rec.Root, rec.User, slackui.HelpText)
			return settled
		}
	}
	// A reply goes to the runner, which tells a thread that is not a
	// conversation (ErrNoThread) from one whose first checkpoint is
	// still being written (ErrKept).
	if rec.Kind == intakeReply {
		ev := messageEvent{User: rec.User, Channel: rec.Channel, TS: rec.TS, ThreadTS: rec.Root}
		for {
			token := s.held.token(id)
			// Looked at once the kept reply expired: the runner takes
			// it back from what the first save is to hand over, unless
			// that save was made, and a thread still without one is not
			// a conversation. Kept again instead, it would be handed
			// over by a first save made right after, and lost: its
			// request settled here.
			expired := rec.KeptUntil != 0 && s.opts.Now().UnixMilli() >= rec.KeptUntil
			ok, kept := s.reply(ctx, rec.Team, thread, ev, text, images, id, rec.KeptUntil != 0, expired, log)
			now := s.opts.Now()
			switch {
			case !kept && ok:
				return settled
			case !kept:
				return again // the store, or a look-up, failed
			case rec.KeptUntil == 0:
				rec.KeptUntil = now.Add(runner.KeptReplyTTL).UnixMilli()
			case now.UnixMilli() >= rec.KeptUntil && !expired:
				// Kept again by a look just before the kept time ended:
				// it is looked at a last time at once.
				continue
			case now.UnixMilli() >= rec.KeptUntil:
				return settled // a runner that keeps it even so
			}
			if !s.keptReply(ctx, id, token, h, rec, log) {
				return letGo
			}
			// Asked again: by the start (the hold renewed), or because
			// another attempt of this process took the request over, under
			// a token whose hold is checked, as before any hand-on.
			switch held, err := s.holds(ctx, id, h, log); {
			case err != nil:
				return again
			case !held:
				return settled
			}
		}
	}
	err := s.svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: rec.User, Team: rec.Team, Channel: rec.Channel, Text: text, Images: images, TS: rec.TS})
	switch {
	case err == nil:
		return settled
	case errors.Is(err, runner.ErrThreadExists):
		log.Info("conversation already started")
		return settled
	case errors.Is(err, runner.ErrBusy):
		return due // another process is starting it
	case errors.Is(err, runner.ErrLeaseLost):
		log.WithError(err).Warn("starting a conversation; nothing was saved, the request stays due and is tried again")
		return due
	}
	log.WithError(err).Error("starting a conversation")
	s.ephemeral(ctx, rec.Channel, rec.Root, rec.User, slackui.TextTryAgain)
	return due
}

// filesTimeout bounds the download of a request's attached images, well
// within the hold that the hand-on after it counts on (intakeRetry).
const filesTimeout = intakeRetry / 2

// attachments is the request's text as the model is to read it, with a
// line for each attached file, and the images among them that the model
// is shown, downloaded now (Options.Files). A request without files is
// its text.
func (s *Server) attachments(ctx context.Context, rec intake, log logrus.FieldLogger) (string, []llm.Image) {
	if len(rec.Files) == 0 {
		return rec.Text, nil
	}
	fctx, cancel := context.WithTimeout(ctx, filesTimeout)
	defer cancel()
	var lines []string
	var images []llm.Image
	if s.opts.Files != nil {
		lines, images = s.opts.Files.Read(fctx, rec.Files)
	} else {
		lines, _ = (*slackfiles.Fetcher)(nil).Read(fctx, rec.Files)
	}
	log.WithFields(logrus.Fields{"files": len(rec.Files), "images": len(images)}).Debug("read the files attached to a request")
	text := strings.Join(lines, "\n")
	if rec.Text != "" {
		text = rec.Text + "\n" + text
	}
	return text, images
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
		slack.MsgOptionText(slackui.RequestText(rec.User, rec.Typed), false),
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
		// The bot's own message: another app can post metadata of any
		// kind.
		ours := m.BotID != "" && (s.opts.BotUserID == "" || m.User == s.opts.BotUserID)
		if m.Metadata.EventType == requestMetadata && m.Metadata.EventPayload["request"] == id && ours {
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
	// While Redis is down, the first failure is logged, then a reminder
	// a minute, then the end of the outage.
	outage := &runner.OutageLog{Log: s.log.WithField("loop", "intake"), Now: s.opts.Now}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.opts.Now()
		if now.Sub(renewed) >= intakeRetry/3 {
			if held := s.held.all(); len(held) > 0 {
				if _, err := s.store.HoldIntake(ctx, held, now.Add(intakeRetry)); err != nil && ctx.Err() == nil {
					outage.Failed("renewing the holds of queued and running requests", err)
				}
			}
			renewed = now
		}
		token := rand.Text()
		due, err := s.store.DueIntake(ctx, token, now, now.Add(intakeRetry), 50)
		switch {
		case err != nil && ctx.Err() == nil:
			outage.Failed("reading accepted requests", err)
		case err == nil:
			outage.Answered()
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
