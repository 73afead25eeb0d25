package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/interrupt"
	"github.com/countersign/countersign/runner"
)

// interaction handles button clicks and modal submissions.
func (s *Server) interaction(w http.ResponseWriter, r *http.Request, body []byte) {
	form, err := url.ParseQuery(string(body))
	var cb slack.InteractionCallback
	if err == nil {
		err = json.Unmarshal([]byte(form.Get("payload")), &cb)
	}
	if err != nil || cb.User.ID == "" {
		http.Error(w, "malformed interaction payload", http.StatusBadRequest)
		return
	}
	switch cb.Type {
	case slack.InteractionTypeBlockActions:
		if !s.elicitAction(w, r, cb) {
			s.blockAction(w, r, cb)
		}
	case slack.InteractionTypeViewSubmission:
		if !s.elicitSubmission(w, r, cb) {
			s.viewSubmission(w, r, cb)
		}
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// click is one button press, with what its reference stands for.
type click struct {
	cb     slack.InteractionCallback
	action *slack.BlockAction
	ref    ref
	log    logrus.FieldLogger
}

func (c click) user() string    { return c.cb.User.ID }
func (c click) channel() string { return c.cb.Channel.ID }

// blockAction handles a button on a card.
func (s *Server) blockAction(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback) {
	if len(cb.ActionCallback.BlockActions) == 0 {
		http.Error(w, "no action in payload", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	action := cb.ActionCallback.BlockActions[0]
	log := s.log.WithFields(logrus.Fields{"user": cb.User.ID, "channel": cb.Channel.ID, "action": action.ActionID})
	// The same payload delivered twice is one click.
	first, err := s.store.Dedup(ctx, "action:"+cb.User.ID+":"+action.ActionTs+":"+action.ActionID, dedupTTL)
	if err != nil {
		log.WithError(err).Error("dedup of a click")
		w.WriteHeader(http.StatusOK)
		s.background(ctx, func(ctx context.Context) { s.ephemeral(ctx, cb.Channel.ID, "", cb.User.ID, textTryAgain) })
		return
	}
	if !first {
		w.WriteHeader(http.StatusOK)
		return
	}
	rf, ok, err := s.lookupRef(ctx, action.Value)
	if err != nil {
		log.WithError(err).Error("looking up a card reference")
		w.WriteHeader(http.StatusOK)
		s.background(ctx, func(ctx context.Context) { s.ephemeral(ctx, cb.Channel.ID, "", cb.User.ID, textTryAgain) })
		return
	}
	c := click{cb: cb, action: action, ref: rf, log: log.WithField("thread", rf.Thread)}
	var answer string
	if !ok {
		answer = textNotPending
	} else {
		switch action.ActionID {
		case ActionApprove, ActionRetry:
			answer = s.decide(ctx, c, interrupt.Decision{Kind: interrupt.Approve, By: c.user()})
		case ActionMarkDone:
			answer = s.decide(ctx, c, interrupt.Decision{Kind: interrupt.MarkDone, By: c.user()})
		case ActionSkip:
			answer = s.decide(ctx, c, interrupt.Decision{Kind: interrupt.Reject, By: c.user()})
		case ActionEdit, ActionReject:
			answer = s.openModal(ctx, c)
		case ActionRetryRun:
			answer = s.retryRun(ctx, c)
		}
	}
	w.WriteHeader(http.StatusOK)
	if answer != "" {
		s.background(ctx, func(ctx context.Context) { s.ephemeral(ctx, c.channel(), threadTS(cb), c.user(), answer) })
	}
}

// lookupRef finds what a button's value stands for.
func (s *Server) lookupRef(ctx context.Context, value string) (ref, bool, error) {
	if value == "" || len(value) > 100 {
		return ref{}, false, nil
	}
	raw, ok, err := s.store.Ref(ctx, value)
	if err != nil || !ok {
		return ref{}, false, err
	}
	var rf ref
	if err := json.Unmarshal(raw, &rf); err != nil {
		return ref{}, false, nil
	}
	return rf, true, nil
}

// pending returns the card's call if it still waits for this decision
// round, or what to tell the person.
func (s *Server) pending(ctx context.Context, c click) (*agent.State, *agent.Call, string) {
	st, call, err := s.svc.Call(ctx, c.ref.Thread, c.ref.Call)
	switch {
	case errors.Is(err, agent.ErrUnknownCall):
		return nil, nil, textNotPending
	case err != nil:
		c.log.WithError(err).Error("loading a call")
		return nil, nil, textTryAgain
	case call.Attempts != c.ref.Attempt || !call.Status.Waiting():
		if call.Decision != nil && call.Attempts == c.ref.Attempt {
			return nil, nil, alreadyText(*call.Decision)
		}
		return nil, nil, textNotPending
	}
	return st, call, ""
}

// authorize checks the policy; a refusal is audited.
func (s *Server) authorize(ctx context.Context, c click, st *agent.State, call *agent.Call) string {
	rule, _ := s.policy.RuleFor(call.Tool)
	ok, why, err := rule.MayApprove(c.user(), st.Requester, s.groups.contains(ctx))
	if err != nil {
		c.log.WithError(err).Error("checking who may approve")
		return "I couldn't check whether you may decide this call. Please try again."
	}
	if ok {
		return ""
	}
	s.svc.Audit(ctx, c.ref.Thread, *call, map[string]string{"decision": "refused", "by": c.user(), "reason": why, "action": c.action.ActionID})
	c.log.Info("click refused by policy")
	return "You can't decide this call: " + why + "."
}

// decide applies d to the card's call and lets the run go on; it returns
// what to tell the person, or "".
func (s *Server) decide(ctx context.Context, c click, d interrupt.Decision) string {
	st, call, msg := s.pending(ctx, c)
	if msg != "" {
		return msg
	}
	if msg := s.authorize(ctx, c, st, call); msg != "" {
		return msg
	}
	if msg := s.claim(ctx, c, d); msg != "" {
		return msg
	}
	return ""
}

// claim records the decision and drives the run in the background.
func (s *Server) claim(ctx context.Context, c click, d interrupt.Decision) string {
	err := s.svc.Decide(ctx, c.ref.Thread, c.ref.Call, d)
	var lost *runner.AlreadyDecidedError
	var settled *agent.DecidedError
	switch {
	case errors.As(err, &lost):
		return alreadyText(lost.Decision)
	case errors.As(err, &settled), errors.Is(err, agent.ErrUnknownCall):
		return textNotPending
	case err != nil:
		c.log.WithError(err).Error("recording a decision")
		return textTryAgain
	}
	c.log.WithField("decision", d.Kind.String()).Info("decision recorded")
	thread := c.ref.Thread
	s.background(ctx, func(ctx context.Context) {
		if err := s.svc.Drive(ctx, thread); err != nil {
			s.log.WithField("thread", thread).WithError(err).Error("resuming after a decision")
		}
	})
	return ""
}

// openModal opens the edit or reject modal while the trigger is fresh.
func (s *Server) openModal(ctx context.Context, c click) string {
	st, call, msg := s.pending(ctx, c)
	if msg != "" {
		return msg
	}
	if call.Status != agent.Pending {
		return textNotPending
	}
	if msg := s.authorize(ctx, c, st, call); msg != "" {
		return msg
	}
	value := c.action.Value
	view := RejectModal(*call, value)
	if c.action.ActionID == ActionEdit {
		view = EditModal(*call, value)
	}
	if _, err := s.api.OpenViewContext(ctx, c.cb.TriggerID, view); err != nil {
		c.log.WithError(err).Error("opening a modal")
		return "I couldn't open the form (" + err.Error() + "). Please try again."
	}
	return ""
}

// retryRun resumes a failed run from the error card.
func (s *Server) retryRun(ctx context.Context, c click) string {
	thread := c.ref.Thread
	s.background(ctx, func(ctx context.Context) {
		err := s.svc.Retry(ctx, thread)
		switch {
		case errors.Is(err, runner.ErrNotFailed):
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), "This run is no longer stopped; nothing to retry.")
		case errors.Is(err, runner.ErrBusy):
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), textBusy)
		case err != nil:
			c.log.WithError(err).Error("retrying a run")
		}
	})
	return ""
}

// viewSubmission handles the edit and reject modals.
func (s *Server) viewSubmission(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback) {
	ctx := r.Context()
	log := s.log.WithFields(logrus.Fields{"user": cb.User.ID, "view": cb.View.CallbackID})
	first, err := s.store.Dedup(ctx, "view:"+cb.View.ID+":"+cb.View.Hash, dedupTTL)
	if err != nil {
		log.WithError(err).Error("dedup of a form")
		writeErrors(w, cb, textTryAgain)
		return
	}
	if !first {
		w.WriteHeader(http.StatusOK)
		return
	}
	rf, ok, err := s.lookupRef(ctx, cb.View.PrivateMetadata)
	if err != nil || !ok {
		writeErrors(w, cb, textNotPending)
		return
	}
	c := click{cb: cb, action: &slack.BlockAction{ActionID: cb.View.CallbackID, Value: cb.View.PrivateMetadata}, ref: rf, log: log.WithField("thread", rf.Thread)}
	st, call, msg := s.pending(ctx, c)
	if msg == "" {
		msg = s.authorize(ctx, c, st, call)
	}
	if msg != "" {
		writeErrors(w, cb, msg)
		return
	}
	d := interrupt.Decision{By: cb.User.ID}
	switch cb.View.CallbackID {
	case CallbackEdit:
		args := strings.TrimSpace(inputValue(cb, BlockArgs, InputArgs))
		if !json.Valid([]byte(args)) {
			writeErrors(w, cb, "That is not valid JSON. Check the brackets, quotes and commas.")
			return
		}
		if err := s.svc.Agent().ValidateArgs(call.Tool, json.RawMessage(args)); err != nil {
			writeErrors(w, cb, "These arguments don't fit the tool: "+err.Error())
			return
		}
		d.Kind, d.Args = interrupt.Edit, json.RawMessage(args)
	case CallbackReject:
		d.Kind, d.Reason = interrupt.Reject, strings.TrimSpace(inputValue(cb, BlockReason, InputReason))
	default:
		w.WriteHeader(http.StatusOK)
		return
	}
	if msg := s.claim(ctx, c, d); msg != "" {
		writeErrors(w, cb, msg)
		return
	}
	w.WriteHeader(http.StatusOK) // closes the modal
}

// writeErrors shows msg inline in the modal's one input.
func writeErrors(w http.ResponseWriter, cb slack.InteractionCallback, msg string) {
	block := BlockReason
	if cb.View.CallbackID == CallbackEdit {
		block = BlockArgs
	}
	writeJSON(w, slack.NewErrorsViewSubmissionResponse(map[string]string{block: msg}))
}

func inputValue(cb slack.InteractionCallback, block, action string) string {
	if b, ok := cb.View.State.Values[block]; ok {
		return b[action].Value
	}
	return ""
}

// alreadyText tells a late clicker who decided first.
func alreadyText(d interrupt.Decision) string {
	if d.Kind == interrupt.Expire {
		return "This request has expired."
	}
	return fmt.Sprintf("Already %s by <@%s>.", d.Kind.Past(), d.By)
}

// threadTS is the thread a click happened in, for ephemeral answers.
func threadTS(cb slack.InteractionCallback) string {
	if cb.Container.ThreadTs != "" {
		return cb.Container.ThreadTs
	}
	return cb.Message.ThreadTimestamp
}
