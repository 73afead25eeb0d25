package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// parseInteraction reads an interaction's payload from its form body; a
// payload that does not read, or names no user, is answered 400 and ok
// is false.
func parseInteraction(w http.ResponseWriter, body []byte) (cb slack.InteractionCallback, ok bool) {
	form, err := url.ParseQuery(string(body))
	if err == nil {
		err = json.Unmarshal([]byte(form.Get("payload")), &cb)
	}
	if err != nil || cb.User.ID == "" {
		http.Error(w, "malformed interaction payload", http.StatusBadRequest)
		return cb, false
	}
	return cb, true
}

// interaction handles button clicks and modal submissions.
func (s *Server) interaction(w http.ResponseWriter, r *http.Request, body []byte) {
	cb, ok := parseInteraction(w, body)
	if !ok {
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
	// fromHome: the button is in the Home tab, not on a card in a
	// channel; the payload names no channel.
	fromHome bool
}

func (c click) user() string    { return c.cb.User.ID }
func (c click) channel() string { return c.cb.Channel.ID }

// decision is the runner's decision of kind on the click's card, with
// where and by whom it was made; the runner checks all of it.
func (c click) decision(kind agent.Kind) runner.Decision {
	d := runner.Decision{
		Thread: c.ref.Thread, Call: c.ref.Call, Round: c.ref.Attempt, Hash: c.ref.Hash,
		Team: c.cb.Team.ID, Channel: c.cb.Channel.ID, By: c.user(), Kind: kind,
	}
	if c.fromHome {
		// The call's own channel; the runner checks that the person may
		// decide it from outside that channel.
		_, d.Channel, _, _ = slackui.ParseThread(c.ref.Thread)
		d.FromInbox = true
	}
	return d
}

// blockAction handles a button on a card.
func (s *Server) blockAction(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback) {
	if len(cb.ActionCallback.BlockActions) == 0 {
		http.Error(w, "no action in payload", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	action := cb.ActionCallback.BlockActions[0]
	if action.ActionID == slackui.ActionMCPConnect {
		w.WriteHeader(http.StatusOK) // a link: the browser does the rest
		return
	}
	if s.connectionAction(w, r, cb, action) {
		return
	}
	log := s.log.WithFields(logrus.Fields{"user": cb.User.ID, "channel": cb.Channel.ID, "action": action.ActionID})
	fromHome := cb.View.Type == slack.VTHomeTab
	if fromHome && s.home == nil {
		w.WriteHeader(http.StatusOK) // the Home tab is off: it shows no buttons
		return
	}
	// tellClicker answers the person: in the thread they clicked in, or
	// at the top of their Home tab, published again.
	tellClicker := func(answer string) {
		if fromHome {
			s.background(ctx, func(ctx context.Context) { s.home.Publish(ctx, cb.User.ID, answer) })
			return
		}
		if answer != "" {
			s.background(ctx, func(ctx context.Context) {
				s.tell(ctx, cb.Channel.ID, threadTS(cb), cb.User.ID, cb.ResponseURL, answer)
			})
		}
	}
	if opensModal(action.ActionID) {
		s.modalAction(ctx, w, cb, action, log, fromHome, tellClicker)
		return
	}
	cc := s.checkClick(ctx, cb, action, log, fromHome)
	if cc.repeat {
		w.WriteHeader(http.StatusOK)
		return
	}
	answer := cc.answer
	if cc.ok {
		c := cc.click
		switch action.ActionID {
		case slackui.ActionApprove, slackui.ActionRetry:
			answer = s.decide(ctx, c, c.decision(agent.Approve))
		case slackui.ActionMarkDone:
			answer = s.decide(ctx, c, c.decision(agent.MarkDone))
		case slackui.ActionSkip:
			answer = s.decide(ctx, c, c.decision(agent.Reject))
		case slackui.ActionRetryRun:
			answer = s.retryRun(ctx, c)
		case slackui.ActionRestartRun, slackui.ActionCancelRun:
			answer = s.changedRun(ctx, c, action.ActionID == slackui.ActionRestartRun)
		}
	}
	w.WriteHeader(http.StatusOK)
	tellClicker(answer)
}

// checkedClick is a click whose dedup is taken and whose reference is
// looked up: the click if ok, else what to tell the person, unless it is
// a repeated delivery, which is answered with nothing.
type checkedClick struct {
	click  click
	ok     bool
	answer string
	repeat bool
}

// checkClick takes the click's dedup and finds what its button stands
// for.
func (s *Server) checkClick(ctx context.Context, cb slack.InteractionCallback, action *slack.BlockAction, log logrus.FieldLogger, fromHome bool) checkedClick {
	// The same payload delivered twice is one click. What the button
	// names is read in the same step: the claim of the card's token in
	// the thread its value names (cardref.go), or for a card posted
	// before, its reference.
	dedup := "action:" + cb.User.ID + ":" + action.ActionTs + ":" + action.ActionID
	var (
		first, ok bool
		raw       []byte
		err       error
		rf        ref
	)
	v, isCard := parseCardValue(action.Value)
	if isCard {
		first, raw, ok, err = s.store.DedupClaim(ctx, dedup, dedupTTL, v.thread, v.claimKey())
		if ok {
			rf, ok = v.ref(raw)
		}
	} else {
		name := action.Value
		if len(name) > maxRefName {
			name = ""
		}
		first, raw, ok, err = s.store.DedupRef(ctx, dedup, dedupTTL, name)
		ok = ok && json.Unmarshal(raw, &rf) == nil
	}
	if err != nil {
		log.WithError(err).Error("dedup of a click, or its card reference")
		return checkedClick{answer: slackui.TextTryAgain}
	}
	if !first {
		return checkedClick{repeat: true}
	}
	if !ok {
		return checkedClick{answer: slackui.TextNotPending}
	}
	return checkedClick{ok: true, click: click{cb: cb, action: action, ref: rf, log: log.WithField("thread", rf.Thread), fromHome: fromHome}}
}

// lookupRef finds what a button's value stands for.
func (s *Server) lookupRef(ctx context.Context, value string) (ref, bool, error) {
	if v, ok := parseCardValue(value); ok {
		claims, err := s.store.ClaimValues(ctx, v.thread, []string{v.claimKey()})
		if err != nil {
			return ref{}, false, err
		}
		claim, ok := claims[v.claimKey()]
		if !ok {
			return ref{}, false, nil
		}
		rf, ok := v.ref(claim)
		return rf, ok, nil
	}
	if value == "" || len(value) > maxRefName {
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

// maxRefName is the longest button value that may name a reference.
const maxRefName = 100

// answer is what to tell a person whose decision the runner did not
// record, or "" if it did.
func answer(log logrus.FieldLogger, err error) string {
	msg, unknown := slackui.DecisionAnswer(err)
	if unknown {
		log.WithError(err).Error("recording a decision")
	}
	return msg
}

// decide records d and drives the run in the background; it returns what
// to tell the person, or "".
//
// The decision and the drive are one job (runner.DecideAndDrive), which
// may claim the decision with the resumed run's first save: the request
// waits for the claim's answer only, never for the tool or the model.
// When no background slot is free at once, the decision is recorded
// here and the drive queued, as the request must not wait for a slot.
//
// The request may end before the claim answers (Slack gives up, or
// storage is slow): the job goes on and may still record the decision.
// The person is then told it is being recorded — the card shows it when
// it is — and, should the claim be lost or refused after all, the job
// tells them so, as the request would have. So too when the claim's
// answer never comes back (runner.ErrUnsettled): the runner reads the
// claim back once storage answers, and the job tells what it learns.
func (s *Server) decide(ctx context.Context, c click, d runner.Decision) string {
	w := &claimWait{answered: make(chan error, 1)}
	started := s.backgroundNow(ctx, func(ctx context.Context) {
		var (
			decided   error
			unsettled bool // the first answer was that the claim's fate is unknown
			calls     int
		)
		err := s.svc.DecideAndDrive(ctx, d, func(err error) {
			decided = err
			if calls++; calls == 1 {
				unsettled = errors.Is(err, runner.ErrUnsettled)
				w.claimed(err)
			}
		})
		// A person told the decision is being recorded hears of it
		// again only if it was not.
		if (w.late() || unsettled) && decided != nil {
			s.tellLate(ctx, c, decided)
		}
		if decided == nil && err != nil {
			s.log.WithField("thread", d.Thread).WithError(err).Error("resuming after a decision")
		}
	})
	var err error
	if started {
		// The job goes on whatever becomes of the request; only the
		// answer to the person waits for it.
		var answered bool
		if answered, err = w.wait(ctx); !answered {
			c.log.WithField("decision", d.Kind.String()).WithError(context.Cause(ctx)).Warn("the request ended before the decision's claim answered; the job goes on")
			return slackui.TextRecording
		}
		if errors.Is(err, runner.ErrUnsettled) {
			// The claim may have been written: never "try again". The
			// job tells the person if it turns out it was not.
			return slackui.TextRecording
		}
	} else {
		err = s.svc.Decide(ctx, d)
	}
	if refused := (*runner.RefusedError)(nil); errors.As(err, &refused) && refused.Changed {
		s.drive(ctx, d.Thread) // shows what changed
	}
	if msg := answer(c.log, err); msg != "" {
		return msg
	}
	c.log.WithField("decision", d.Kind.String()).Info("decision recorded")
	if !started {
		s.drive(ctx, d.Thread)
	}
	return ""
}

// claimWait is what a click's request and its job share: the claim's
// answer, which the request waits for until it ends, and whether it
// stopped waiting first, in which case the answer is the job's to tell.
type claimWait struct {
	answered chan error // buffered: the job never blocks on it
	mu       sync.Mutex
	gone     bool // the request stopped waiting
	told     bool // the answer went to the request
}

// claimed hands the claim's answer to the request, if it still waits.
func (w *claimWait) claimed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.gone {
		w.told = true
		w.answered <- err
	}
}

// wait returns the claim's answer, or answered false if ctx ends first;
// from then on the answer is the job's to tell (late).
func (w *claimWait) wait(ctx context.Context) (answered bool, err error) {
	select {
	case err = <-w.answered:
		return true, err
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.told {
		return true, <-w.answered // it came as the request ended
	}
	w.gone = true
	return false, nil
}

// late reports whether the request stopped waiting before the claim
// answered.
func (w *claimWait) late() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

// tellLate tells the person whose request ended before their decision's
// claim answered, or who was told it was being recorded as its claim's
// answer was lost, that it was not recorded after all, and why (or that
// the bot could not learn whether it was): in the thread they clicked in,
// or at the top of their Home tab.
func (s *Server) tellLate(ctx context.Context, c click, err error) {
	if refused := (*runner.RefusedError)(nil); errors.As(err, &refused) && refused.Changed {
		s.drive(ctx, c.ref.Thread) // shows what changed
	}
	msg := answer(c.log, err)
	if errors.Is(err, runner.ErrUnsettled) {
		msg = textUnsettled
	}
	if msg == "" {
		return
	}
	if c.fromHome {
		s.home.Publish(ctx, c.user(), msg)
		return
	}
	s.tell(ctx, c.channel(), threadTS(c.cb), c.user(), c.cb.ResponseURL, msg)
}

// textUnsettled tells a person, told their decision was being recorded,
// that the bot could not learn whether it was: the database did not
// answer for minutes. The card shows the decision once a replica resumes
// the run, if it was recorded.
const textUnsettled = "I couldn't learn whether your decision was recorded: the database isn't answering. " +
	"If the card still shows its buttons in a few minutes, decide again."

// textSubmissionUnsettled answers, in the modal, a decision whose claim's
// answer was lost: it may stand.
const textSubmissionUnsettled = "Your decision may already be recorded, but the database stopped answering: " +
	"the card will show it. Submit again in a minute to make sure; it is not recorded twice."

// backgroundNow is background for a job that the request waits on (a
// click's decision): it starts fn at once if a slot is free, and reports
// whether it did; it starts nothing if none is.
func (s *Server) backgroundNow(ctx context.Context, fn func(ctx context.Context)) bool {
	select {
	case s.slots <- struct{}{}:
	default:
		return false
	}
	s.spawn(ctx, func(ctx context.Context) {
		defer func() { <-s.slots }()
		fn(ctx)
	})
	return true
}

// drive lets the thread's run go on in the background.
func (s *Server) drive(ctx context.Context, thread string) {
	s.background(ctx, func(ctx context.Context) {
		if err := s.svc.Drive(ctx, thread); err != nil {
			s.log.WithField("thread", thread).WithError(err).Error("resuming after a decision")
		}
	})
}

// decisionModal is the edit or reject modal of the click's call, if the
// person may make that decision, else what to tell them.
func (s *Server) decisionModal(ctx context.Context, c click, kind agent.Kind) (*slack.ModalViewRequest, string) {
	call, err := s.svc.Check(ctx, c.decision(kind))
	if msg := answer(c.log, err); msg != "" {
		return nil, msg
	}
	value := c.action.Value
	if c.fromHome {
		value = homeMetaPrefix + value
	}
	view := slackui.RejectModal(*call, value)
	if kind == agent.Edit {
		view = slackui.EditModal(*call, value)
	}
	return &view, ""
}

// argsModal shows every byte of the card's arguments.
func (s *Server) argsModal(ctx context.Context, c click) (*slack.ModalViewRequest, string) {
	call, err := s.svc.Call(ctx, c.ref.Thread, c.ref.Call)
	if msg := answer(c.log, err); msg != "" {
		return nil, msg
	}
	view := slackui.ArgsModal(*call)
	return &view, ""
}

// retryRun resumes a failed run from the error card.
func (s *Server) retryRun(ctx context.Context, c click) string {
	m := runner.Message{Thread: c.ref.Thread, Team: c.cb.Team.ID, Channel: c.channel(), By: c.user()}
	s.background(ctx, func(ctx context.Context) {
		err := s.svc.Retry(ctx, m)
		msg, unknown := slackui.RetryAnswer(err)
		if unknown {
			c.log.WithError(err).Error("retrying a run")
		}
		if msg != "" {
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), msg)
		}
	})
	return ""
}

// viewSubmission handles the edit and reject modals. A submission the
// runner refuses gets its reason inline and changes nothing, so the
// person can correct it and submit again. Slack may deliver one
// submission twice: the second finds the decision claimed by the same
// person with the same content, and only closes the modal.
func (s *Server) viewSubmission(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback) {
	ctx := r.Context()
	log := s.log.WithFields(logrus.Fields{"user": cb.User.ID, "view": cb.View.CallbackID})
	meta, fromHome := strings.CutPrefix(cb.View.PrivateMetadata, homeMetaPrefix)
	rf, ok, err := s.lookupRef(ctx, meta)
	if err != nil {
		log.WithError(err).Error("looking up a card reference")
		writeErrors(w, cb, slackui.TextTryAgain)
		return
	}
	if !ok {
		writeErrors(w, cb, slackui.TextNotPending)
		return
	}
	c := click{cb: cb, action: &slack.BlockAction{ActionID: cb.View.CallbackID, Value: meta}, ref: rf, log: log.WithField("thread", rf.Thread),
		fromHome: fromHome && s.home != nil}
	var d runner.Decision
	switch cb.View.CallbackID {
	case slackui.CallbackEdit:
		args := strings.TrimSpace(inputValue(cb, slackui.BlockArgs, slackui.InputArgs))
		if !json.Valid([]byte(args)) {
			writeErrors(w, cb, "That is not valid JSON. Check the brackets, quotes and commas.")
			return
		}
		d = c.decision(agent.Edit)
		d.Args = json.RawMessage(args)
	case slackui.CallbackReject:
		d = c.decision(agent.Reject)
		d.Reason = strings.TrimSpace(inputValue(cb, slackui.BlockReason, slackui.InputReason))
	default:
		w.WriteHeader(http.StatusOK)
		return
	}
	// A modal is opened from a card in a channel, but its submission
	// carries no channel: it is the card's own. One opened from the Home
	// tab is decided as made from there.
	_, d.Channel, _, _ = slackui.ParseThread(rf.Thread)
	d.Team, d.FromInbox = cb.Team.ID, fromHome
	err = s.svc.Decide(ctx, d)
	var lost *runner.AlreadyDecidedError
	if errors.As(err, &lost) && sameSubmission(lost.Decision, d) {
		w.WriteHeader(http.StatusOK)
		return
	}
	if errors.Is(err, runner.ErrUnsettled) {
		// The claim may have been written: not "try again". Submitted
		// again, the same decision closes the modal if it stands.
		c.log.WithField("decision", d.Kind.String()).WithError(err).Warn("the answer to a submitted decision's claim was lost")
		writeErrors(w, cb, textSubmissionUnsettled)
		return
	}
	if msg := answer(c.log, err); msg != "" {
		writeErrors(w, cb, msg)
		return
	}
	c.log.WithField("decision", d.Kind.String()).Info("decision recorded")
	s.drive(ctx, d.Thread)
	if c.fromHome {
		s.background(ctx, func(ctx context.Context) { s.home.Publish(ctx, c.user(), "") })
	}
	w.WriteHeader(http.StatusOK) // closes the modal
}

// sameSubmission reports whether the decision claimed first is d itself,
// delivered again.
func sameSubmission(first agent.Decision, d runner.Decision) bool {
	if first.By != d.By || first.Kind != d.Kind {
		return false
	}
	if d.Kind == agent.Edit {
		args, err := tools.Canonical(d.Args)
		return err == nil && bytes.Equal(args, first.Args)
	}
	return first.Reason == d.Reason
}

// writeErrors shows msg inline in the modal's one input.
func writeErrors(w http.ResponseWriter, cb slack.InteractionCallback, msg string) {
	block := slackui.BlockReason
	if cb.View.CallbackID == slackui.CallbackEdit {
		block = slackui.BlockArgs
	}
	writeJSON(w, slack.NewErrorsViewSubmissionResponse(map[string]string{block: msg}))
}

func inputValue(cb slack.InteractionCallback, block, action string) string {
	if b, ok := cb.View.State.Values[block]; ok {
		return b[action].Value
	}
	return ""
}

// threadTS is the thread a click happened in, for ephemeral answers.
func threadTS(cb slack.InteractionCallback) string {
	if cb.Container.ThreadTs != "" {
		return cb.Container.ThreadTs
	}
	return cb.Message.ThreadTimestamp
}

// changedRun restarts or cancels, from its card, a run the updated bot
// cannot resume.
func (s *Server) changedRun(ctx context.Context, c click, restart bool) string {
	m := runner.Message{Thread: c.ref.Thread, Team: c.cb.Team.ID, Channel: c.channel(), By: c.user()}
	s.background(ctx, func(ctx context.Context) {
		var err error
		if restart {
			err = s.svc.RestartChanged(ctx, m)
		} else {
			err = s.svc.CancelChanged(ctx, m)
		}
		msg, unknown := slackui.ChangedRunAnswer(err)
		if unknown {
			c.log.WithError(err).Error("restarting or cancelling a run after an update")
		}
		if msg != "" {
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), msg)
		}
	})
	return ""
}
