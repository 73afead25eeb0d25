package handlers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/elicit"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// The answers to elicitations (package elicit asks, in the run's thread):
// the buttons of the message that asks, and the form Answer opens. Only
// the person who asked for the run may answer; the first answer counts,
// and travels through the store's mailbox to the process whose call is
// waiting, whichever replica received the click.

// Mailbox carries an answer from the process that received it to the one
// waiting for it. *redisstore.Store is a Mailbox; several processes may
// deliver and receive.
type Mailbox interface {
	Deliver(ctx context.Context, box string, value []byte, ttl time.Duration) error
	Receive(ctx context.Context, box string) ([]byte, error)
}

// elicitAction handles the buttons of an elicitation message, and
// reports whether the click was one of them.
func (s *Server) elicitAction(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback) bool {
	if len(cb.ActionCallback.BlockActions) == 0 {
		return false
	}
	action := cb.ActionCallback.BlockActions[0]
	switch action.ActionID {
	case slackui.ActionElicitAnswer, slackui.ActionElicitDecline, slackui.ActionElicitCancel:
	default:
		return false
	}
	ctx := r.Context()
	log := s.log.WithFields(logrus.Fields{"user": cb.User.ID, "channel": cb.Channel.ID, "action": action.ActionID})
	answer := func(msg string) {
		w.WriteHeader(http.StatusOK)
		if msg != "" {
			s.background(ctx, func(ctx context.Context) { s.ephemeral(ctx, cb.Channel.ID, threadTS(cb), cb.User.ID, msg) })
		}
	}
	rec, msg := s.openElicitation(ctx, action.Value, cb.User.ID)
	if msg != "" {
		answer(msg)
		return true
	}
	if action.ActionID == slackui.ActionElicitAnswer {
		view, err := elicitForm(rec, action.Value+"|"+cb.Message.Timestamp)
		if err != nil {
			log.WithError(err).Warn("elicitation form")
			answer(slackui.ElicitNoForm(err))
			return true
		}
		if _, err := s.api.OpenViewContext(ctx, cb.TriggerID, view); err != nil {
			log.WithError(err).Error("opening the elicitation form")
			answer(slackui.ElicitFormNotOpened(err))
			return true
		}
		answer("")
		return true
	}
	ans := tools.ElicitAnswer{Action: tools.ElicitDecline, By: cb.User.ID}
	if action.ActionID == slackui.ActionElicitCancel {
		ans.Action = tools.ElicitCancel
	}
	answer(s.deliverElicitation(ctx, action.Value, rec, ans, cb.Channel.ID, cb.Message.Timestamp))
	return true
}

// elicitSubmission handles the elicitation form, and reports whether the
// submission was one.
func (s *Server) elicitSubmission(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback) bool {
	if cb.View.CallbackID != slackui.CallbackElicit {
		return false
	}
	ctx := r.Context()
	id, ts, _ := strings.Cut(cb.View.PrivateMetadata, "|")
	rec, msg := s.openElicitation(ctx, id, cb.User.ID)
	if msg != "" {
		writeJSON(w, slack.NewErrorsViewSubmissionResponse(map[string]string{slackui.ElicitFirstBlock(rec.Schema): msg}))
		return true
	}
	content, problems := slackui.ElicitContent(rec.Schema, cb.View.State)
	if len(problems) > 0 {
		writeJSON(w, slack.NewErrorsViewSubmissionResponse(problems))
		return true
	}
	_, channel, _, _ := slackui.ParseThread(rec.Thread)
	channel = cmp.Or(rec.Channel, channel) // asked by direct message (elicit.Record.Channel)
	ans := tools.ElicitAnswer{Action: tools.ElicitAccept, Content: content, By: cb.User.ID}
	if msg := s.deliverElicitation(ctx, id, rec, ans, channel, ts); msg != "" {
		writeJSON(w, slack.NewErrorsViewSubmissionResponse(map[string]string{slackui.ElicitFirstBlock(rec.Schema): msg}))
		return true
	}
	w.WriteHeader(http.StatusOK) // closes the form
	return true
}

// openElicitation returns the request behind a button or form if user
// may answer it, or what to tell them.
func (s *Server) openElicitation(ctx context.Context, id, user string) (elicit.Record, string) {
	var rec elicit.Record
	if s.opts.Mailbox == nil || id == "" || len(id) > 100 {
		return rec, slackui.TextNotPending
	}
	raw, ok, err := s.store.Ref(ctx, elicit.Ref(id))
	switch {
	case err != nil:
		s.log.WithError(err).Error("looking up an elicitation")
		return rec, slackui.TextTryAgain
	case !ok || json.Unmarshal(raw, &rec) != nil:
		return rec, slackui.TextNotPending
	case user != rec.Requester:
		return rec, slackui.ElicitNotYours(rec.Requester)
	}
	return rec, ""
}

// deliverElicitation sends the first answer to the waiting call and
// updates the message; a later answer changes nothing. The answer is
// claimed (set once, in the thread) before it is delivered: a delivery
// that fails is answered "try again", and the same answer sent again
// finds its own claim and is delivered then — a failed delivery never
// turns into "already answered".
func (s *Server) deliverElicitation(ctx context.Context, id string, rec elicit.Record, ans tools.ElicitAnswer, channel, ts string) string {
	if rec.Paused {
		return s.answerPaused(ctx, rec, ans, channel, ts)
	}
	ttl := time.Until(rec.Deadline) + elicit.TTL
	raw, _ := json.Marshal(ans)
	winner, first, err := s.store.Claim(ctx, rec.Thread, elicit.Ref(id), raw)
	if err != nil {
		s.log.WithError(err).Error("claiming an elicitation answer")
		return slackui.TextTryAgain
	}
	if !first && !bytes.Equal(winner, raw) {
		return slackui.TextElicitAnswered
	}
	if err := s.opts.Mailbox.Deliver(ctx, elicit.Ref(id), raw, ttl); err != nil {
		s.log.WithError(err).Error("delivering an elicitation answer")
		return slackui.TextTryAgain
	}
	s.log.WithFields(logrus.Fields{"thread": rec.Thread, "tool": rec.Tool, "action": string(ans.Action)}).Info("elicitation answered")
	if ts != "" {
		line := slackui.ElicitOutcome(ans.Action, ans.By)
		s.background(ctx, func(ctx context.Context) { elicit.Settle(ctx, s.api, s.log, channel, ts, rec, line) })
	}
	return ""
}

// answerPaused gives the runner the answer to a request of a paused run
// (elicit's pause.go), which owns its rules, and resumes the run.
func (s *Server) answerPaused(ctx context.Context, rec elicit.Record, ans tools.ElicitAnswer, channel, ts string) string {
	err := s.svc.Answer(ctx, runner.InputAnswer{Thread: rec.Thread, Call: rec.Call, Round: rec.Attempt, Request: rec.Input, By: ans.By, Answer: ans})
	var refusal *runner.RefusedError
	switch {
	case errors.As(err, &refusal):
		return slackui.ElicitNotYours(rec.Requester)
	case errors.Is(err, runner.ErrInputExpired), errors.Is(err, runner.ErrNotPending) && !time.Now().Before(rec.Deadline):
		if ts != "" {
			s.background(ctx, func(ctx context.Context) {
				elicit.Settle(ctx, s.api, s.log, channel, ts, rec, slackui.TextElicitExpired)
			})
		}
		return slackui.TextElicitExpired
	case errors.Is(err, runner.ErrAnswered), errors.Is(err, runner.ErrNotPending):
		return slackui.TextElicitAnswered
	case err != nil:
		s.log.WithError(err).Error("answering an input request")
		return slackui.TextTryAgain
	}
	s.log.WithFields(logrus.Fields{"thread": rec.Thread, "tool": rec.Tool, "action": string(ans.Action)}).Info("input request answered")
	if ts != "" {
		line := slackui.ElicitOutcome(ans.Action, ans.By)
		s.background(ctx, func(ctx context.Context) { elicit.Settle(ctx, s.api, s.log, channel, ts, rec, line) })
	}
	s.drive(ctx, rec.Thread)
	return ""
}

// elicitForm is the form of rec's requested schema, its fields in the
// schema's order; meta is kept as the view's private metadata.
func elicitForm(rec elicit.Record, meta string) (slack.ModalViewRequest, error) {
	fields, err := slackui.ElicitFields(rec.Schema)
	if err != nil {
		return slack.ModalViewRequest{}, err
	}
	return slackui.ElicitForm(rec.Tool, rec.Message, fields, meta)
}
