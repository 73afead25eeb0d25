package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/slackui"
)

// Buttons that open a modal (Edit, Reject, Show all) must call views.open
// within 3 seconds of the click: past them, Slack refuses the trigger
// (expired_trigger_id) and the click does nothing. The checks before the
// modal — the click's dedup, the card's reference, whether the person may
// decide — are storage round trips, and storage can be slow. So the
// checks get a budget: done within it, the modal opens as it is (or the
// person is told why not, as for any click); not done, a modal that says
// "checking" opens while the trigger is fresh, and what the checks find
// replaces it (views.update) — the form, or why there is none.

// modalBudget is how long a click that opens a modal waits for its checks
// before it opens the modal without them. The trigger lasts 3 seconds
// from the click; the payload's way here and views.open's way to Slack
// take part of them.
const modalBudget = time.Second

// opensModal reports whether a button opens a modal.
func opensModal(actionID string) bool {
	return actionID == slackui.ActionEdit || actionID == slackui.ActionReject || actionID == slackui.ActionShowArgs
}

// modalCheck is what the checks of a click that opens a modal found: the
// modal, or what to tell the person instead; nothing for a repeated
// delivery of the click.
type modalCheck struct {
	view   *slack.ModalViewRequest
	answer string
	repeat bool
}

// modalAction handles Edit, Reject and Show all: it opens the modal within
// the trigger's life however slow the checks are (see above).
func (s *Server) modalAction(ctx context.Context, w http.ResponseWriter, cb slack.InteractionCallback, action *slack.BlockAction,
	log logrus.FieldLogger, fromHome bool, tellClicker func(string)) {
	checked := make(chan modalCheck, 1)
	bg := context.WithoutCancel(ctx)
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		checked <- s.checkModal(bg, cb, action, log, fromHome)
	}()
	budget := time.NewTimer(modalBudget)
	defer budget.Stop()
	select {
	case mc := <-checked:
		if mc.repeat {
			w.WriteHeader(http.StatusOK)
			return
		}
		if mc.view != nil {
			if _, err := s.api.OpenViewContext(ctx, cb.TriggerID, *mc.view); err != nil {
				log.WithError(err).Error("opening a modal")
				mc.answer = slackui.NotOpened(action.ActionID, err)
			}
		}
		w.WriteHeader(http.StatusOK)
		tellClicker(mc.answer)
		return
	case <-budget.C:
	}
	log.Warn("the checks of a click are slow; opening its modal before them")
	opened, openErr := s.api.OpenViewContext(ctx, cb.TriggerID, slackui.CheckingModal(action.ActionID))
	if openErr != nil {
		log.WithError(openErr).Error("opening a modal")
	}
	w.WriteHeader(http.StatusOK)
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		mc := <-checked
		if openErr != nil {
			// No modal to show the outcome in: answer as for any click.
			if mc.repeat {
				return
			}
			if mc.view != nil {
				mc.answer = slackui.NotOpened(action.ActionID, openErr)
			}
			tellClicker(mc.answer)
			return
		}
		view := slackui.NoticeModal(action.ActionID, mc.answer)
		switch {
		case mc.repeat:
			view = slackui.NoticeModal(action.ActionID, "This click is already being answered in another window.")
		case mc.view != nil:
			view = *mc.view
		}
		if _, err := s.api.UpdateViewContext(bg, view, "", opened.Hash, opened.ID); err != nil {
			log.WithError(err).Error("showing a modal's content")
			if mc.repeat {
				return
			}
			if mc.view != nil {
				mc.answer = slackui.NotOpened(action.ActionID, err)
			}
			tellClicker(mc.answer)
			return
		}
		if !mc.repeat {
			tellClicker("") // the Home tab, published again
		}
	}()
}

// checkModal runs a modal click's checks and builds its modal.
func (s *Server) checkModal(ctx context.Context, cb slack.InteractionCallback, action *slack.BlockAction, log logrus.FieldLogger, fromHome bool) modalCheck {
	cc := s.checkClick(ctx, cb, action, log, fromHome)
	if cc.repeat || !cc.ok {
		return modalCheck{repeat: cc.repeat, answer: cc.answer}
	}
	var mc modalCheck
	switch action.ActionID {
	case slackui.ActionEdit:
		mc.view, mc.answer = s.decisionModal(ctx, cc.click, agent.Edit)
	case slackui.ActionReject:
		mc.view, mc.answer = s.decisionModal(ctx, cc.click, agent.Reject)
	case slackui.ActionShowArgs:
		mc.view, mc.answer = s.argsModal(ctx, cc.click)
	}
	return mc
}
