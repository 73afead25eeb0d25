package handlers

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// Elicitation: a tool (an MCP server) asks, during a call, for input from
// the person who asked for the run. The question is posted in the run's
// thread with three buttons: Answer opens a form built from the requested
// schema, Decline and Cancel answer at once. Only the person who asked for
// the run may answer; the first answer counts. The answer travels through
// the store's mailbox to the process whose call is waiting, whichever
// replica received the click. No answer before the call's deadline
// cancels the request, and the message says so.
//
// A request is saved in the store like a card: what was asked, of whom,
// until when, and, once given, its answer. It outlives the process that
// asked: if that process dies while the form waits, the message's buttons
// still work on any replica, and the answer is kept. The call itself was
// cut off with its process (a stdio server dies with it), so it runs
// again as any call cut off by a crash does (at once if it is
// idempotent, else when a person chooses Retry on the outcome-unknown
// card). When its server then asks the same question in the same call,
// the saved request is used again rather than a new one posted: an answer
// given meanwhile is the answer at once, otherwise the same message waits
// for one, its deadline now the new attempt's.

// Mailbox carries an answer from the process that received it to the one
// waiting for it. *redisstore.Store is a Mailbox; several processes may
// deliver and receive.
type Mailbox interface {
	Deliver(ctx context.Context, box string, value []byte, ttl time.Duration) error
	Receive(ctx context.Context, box string) ([]byte, error)
}

// elicitRecord is what an elicitation's buttons stand for, kept as a
// reference in the store.
type elicitRecord struct {
	Thread    string          `json:"thread"`
	Requester string          `json:"requester"`
	Tool      string          `json:"tool"`
	Message   string          `json:"message"`
	Schema    json.RawMessage `json:"schema"`
	Deadline  time.Time       `json:"deadline"`
	// Call and Attempt are the call and the attempt that asked; TS is
	// the message that asks.
	Call    string `json:"call,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	TS      string `json:"ts,omitempty"`
}

// Elicitor asks people in Slack threads for what a tool needs. It is a
// tools.Elicitor, safe for concurrent use.
type Elicitor struct {
	rep  *Reporter
	mail Mailbox
	log  logrus.FieldLogger
}

var _ tools.Elicitor = (*Elicitor)(nil)

// NewElicitor returns an Elicitor that posts through api and keeps its
// references in store.
func NewElicitor(api *slack.Client, store Store, mail Mailbox, log logrus.FieldLogger) *Elicitor {
	if log == nil {
		l := logrus.New()
		l.Out = io.Discard
		log = l
	}
	return &Elicitor{rep: NewReporter(api, store, nil, log), mail: mail, log: log}
}

// elicitTTL is how long a request's reference outlives its deadline.
const elicitTTL = time.Hour

// Elicit posts the question in the call's thread and waits for the
// answer until ctx ends; then the message says that nobody answered.
func (e *Elicitor) Elicit(ctx context.Context, el tools.Elicitation) (tools.ElicitAnswer, error) {
	_, channel, root, err := slackui.ParseThread(el.Call.Thread)
	if err != nil {
		return tools.ElicitAnswer{}, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(24 * time.Hour)
	}
	ttl := time.Until(deadline) + elicitTTL
	log := e.log.WithFields(logrus.Fields{"thread": el.Call.Thread, "call": el.Call.Call, "tool": el.Tool})
	byCall := elicitCallRef(el)
	id, rec, saved, found := e.earlier(ctx, byCall, el.Call.Attempt)
	switch {
	case found && saved != nil:
		log.WithField("action", string(saved.Action)).Info("the call asked again; answered with the answer given before")
		return *saved, nil
	case found:
		// Still waiting: the same message waits on, until the new deadline.
		rec.Deadline, rec.Attempt = deadline, el.Call.Attempt
		if err := e.save(ctx, id, rec, byCall, ttl); err != nil {
			return tools.ElicitAnswer{}, err
		}
		if rec.TS != "" {
			err := e.rep.retry(ctx, func() error {
				_, _, _, err := e.rep.api.UpdateMessageContext(ctx, channel, rec.TS, slack.MsgOptionText(slackui.ElicitText(rec.Tool, rec.Message), false),
					slack.MsgOptionBlocks(slackui.ElicitMessage(rec.Requester, rec.Tool, rec.Message, rec.Deadline, id)...))
				return err
			})
			if err != nil {
				log.WithError(err).Warn("updating the deadline of a request for input")
			}
		}
		log.Info("the call asked again; the request already posted waits for the answer")
	default:
		rec = elicitRecord{Thread: el.Call.Thread, Requester: el.Call.Requester, Tool: el.Tool, Message: el.Message, Schema: el.Schema,
			Deadline: deadline, Call: el.Call.Call, Attempt: el.Call.Attempt}
		if id, err = randomID(); err != nil {
			return tools.ElicitAnswer{}, err
		}
		if err := e.save(ctx, id, rec, "", ttl); err != nil {
			return tools.ElicitAnswer{}, err
		}
		ts, err := e.rep.post(ctx, channel, slack.MsgOptionTS(root),
			slack.MsgOptionText(slackui.ElicitText(rec.Tool, rec.Message), false), slack.MsgOptionBlocks(slackui.ElicitMessage(rec.Requester, rec.Tool, rec.Message, rec.Deadline, id)...))
		if err != nil {
			return tools.ElicitAnswer{}, fmt.Errorf("post elicitation: %w", err)
		}
		rec.TS = ts
		if err := e.save(ctx, id, rec, byCall, ttl); err != nil {
			return tools.ElicitAnswer{}, err
		}
		log.Info("asked the requester for input")
	}
	data, err := e.mail.Receive(ctx, elicitRef(id))
	if err != nil {
		// Whoever answers now is told it is too late.
		bg := context.WithoutCancel(ctx)
		if _, first, derr := e.rep.store.Claim(bg, rec.Thread, elicitRef(id), []byte(elicitClosed)); derr == nil && first {
			e.settle(bg, channel, rec.TS, rec, "⌛ Nobody answered in time; the request was cancelled.")
		}
		return tools.ElicitAnswer{}, err
	}
	var ans tools.ElicitAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return tools.ElicitAnswer{}, fmt.Errorf("elicitation answer: %w", err)
	}
	log.WithField("action", string(ans.Action)).Info("the requester answered")
	return ans, nil
}

// earlier finds the request an earlier attempt of the call made with the
// same question, and its answer if it has one (the answer is claimed in
// the thread, see deliverElicitation). A request that expired is not used
// again.
func (e *Elicitor) earlier(ctx context.Context, byCall string, attempt int) (string, elicitRecord, *tools.ElicitAnswer, bool) {
	var rec elicitRecord
	raw, ok, err := e.rep.store.Ref(ctx, byCall)
	if err != nil || !ok {
		return "", rec, nil, false
	}
	id := string(raw)
	raw, ok, err = e.rep.store.Ref(ctx, elicitRef(id))
	if err != nil || !ok || json.Unmarshal(raw, &rec) != nil || rec.Attempt == attempt {
		return "", rec, nil, false
	}
	claims, err := e.rep.store.ClaimValues(ctx, rec.Thread, []string{elicitRef(id)})
	if err != nil {
		return "", rec, nil, false
	}
	v, answered := claims[elicitRef(id)]
	if !answered {
		return id, rec, nil, true
	}
	var ans tools.ElicitAnswer
	if string(v) == elicitClosed || json.Unmarshal(v, &ans) != nil {
		return "", rec, nil, false
	}
	return id, rec, &ans, true
}

// save stores a request, and, if byCall is set, that it is its call's
// request for its question.
func (e *Elicitor) save(ctx context.Context, id string, rec elicitRecord, byCall string, ttl time.Duration) error {
	raw, _ := json.Marshal(rec)
	if err := e.rep.store.PutRef(ctx, elicitRef(id), raw, ttl); err != nil {
		return fmt.Errorf("store elicitation: %w", err)
	}
	if byCall == "" {
		return nil
	}
	if err := e.rep.store.PutRef(ctx, byCall, []byte(id), ttl); err != nil {
		return fmt.Errorf("store elicitation: %w", err)
	}
	return nil
}

func (e *Elicitor) settle(ctx context.Context, channel, ts string, rec elicitRecord, line string) {
	settleElicitation(ctx, e.rep, channel, ts, rec, line)
}

func settleElicitation(ctx context.Context, rep *Reporter, channel, ts string, rec elicitRecord, line string) {
	blocks := []slack.Block{slackui.ElicitQuestion(rec.Requester, rec.Tool, rec.Message), slackui.ContextBlock(line)}
	err := rep.retry(ctx, func() error {
		_, _, _, err := rep.api.UpdateMessageContext(ctx, channel, ts, slack.MsgOptionText(slackui.ElicitText(rec.Tool, rec.Message), false), slack.MsgOptionBlocks(blocks...))
		return err
	})
	if err != nil {
		rep.log.WithError(err).Warn("updating an elicitation message")
	}
}

func elicitRef(id string) string { return "elicit:" + id }

// elicitCallRef names a call's request for one question: the thread, the
// call, the tool, the message and the schema.
func elicitCallRef(el tools.Elicitation) string {
	h := sha256.New()
	for _, part := range []string{el.Call.Thread, el.Call.Call, el.Tool, el.Message, string(el.Schema)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "elicit-call:" + hex.EncodeToString(h.Sum(nil)[:16])
}

func randomID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
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
			answer("I can't build a form for this request (" + err.Error() + "). Decline or cancel it.")
			return true
		}
		if _, err := s.api.OpenViewContext(ctx, cb.TriggerID, view); err != nil {
			log.WithError(err).Error("opening the elicitation form")
			answer("I couldn't open the form (" + err.Error() + "). Please try again.")
			return true
		}
		answer("")
		return true
	}
	ans := tools.ElicitAnswer{Action: tools.ElicitDecline, By: cb.User.ID}
	line := "🚫 Declined by " + slackui.UserMention(cb.User.ID) + "."
	if action.ActionID == slackui.ActionElicitCancel {
		ans.Action, line = tools.ElicitCancel, "✖️ Cancelled by "+slackui.UserMention(cb.User.ID)+"."
	}
	answer(s.deliverElicitation(ctx, action.Value, rec, ans, cb.Channel.ID, cb.Message.Timestamp, line))
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
	ans := tools.ElicitAnswer{Action: tools.ElicitAccept, Content: content, By: cb.User.ID}
	if msg := s.deliverElicitation(ctx, id, rec, ans, channel, ts, "✅ Answered by "+slackui.UserMention(cb.User.ID)+"."); msg != "" {
		writeJSON(w, slack.NewErrorsViewSubmissionResponse(map[string]string{slackui.ElicitFirstBlock(rec.Schema): msg}))
		return true
	}
	w.WriteHeader(http.StatusOK) // closes the form
	return true
}

// openElicitation returns the request behind a button or form if user
// may answer it, or what to tell them.
func (s *Server) openElicitation(ctx context.Context, id, user string) (elicitRecord, string) {
	var rec elicitRecord
	if s.opts.Mailbox == nil || id == "" || len(id) > 100 {
		return rec, slackui.TextNotPending
	}
	raw, ok, err := s.store.Ref(ctx, elicitRef(id))
	switch {
	case err != nil:
		s.log.WithError(err).Error("looking up an elicitation")
		return rec, slackui.TextTryAgain
	case !ok || json.Unmarshal(raw, &rec) != nil:
		return rec, slackui.TextNotPending
	case user != rec.Requester:
		return rec, "Only " + slackui.UserMention(rec.Requester) + ", who asked for this turn, can answer this."
	}
	return rec, ""
}

// elicitClosed is the claim of an elicitation that nobody answered in
// time.
const elicitClosed = "closed"

// deliverElicitation sends the first answer to the waiting call and
// updates the message; a later answer changes nothing. The answer is
// claimed (set once, in the thread) before it is delivered: a delivery
// that fails is answered "try again", and the same answer sent again
// finds its own claim and is delivered then — a failed delivery never
// turns into "already answered".
func (s *Server) deliverElicitation(ctx context.Context, id string, rec elicitRecord, ans tools.ElicitAnswer, channel, ts, line string) string {
	ttl := time.Until(rec.Deadline) + elicitTTL
	raw, _ := json.Marshal(ans)
	winner, first, err := s.store.Claim(ctx, rec.Thread, elicitRef(id), raw)
	if err != nil {
		s.log.WithError(err).Error("claiming an elicitation answer")
		return slackui.TextTryAgain
	}
	if !first && !bytes.Equal(winner, raw) {
		return "This request is already answered or closed."
	}
	if err := s.opts.Mailbox.Deliver(ctx, elicitRef(id), raw, ttl); err != nil {
		s.log.WithError(err).Error("delivering an elicitation answer")
		return slackui.TextTryAgain
	}
	s.log.WithFields(logrus.Fields{"thread": rec.Thread, "tool": rec.Tool, "action": string(ans.Action)}).Info("elicitation answered")
	if ts != "" {
		rep := &Reporter{api: s.api, store: s.store, now: s.opts.Now, log: s.log}
		s.background(ctx, func(ctx context.Context) { settleElicitation(ctx, rep, channel, ts, rec, line) })
	}
	return ""
}

// elicitForm is the form of rec's requested schema, its fields in the
// schema's order; meta is kept as the view's private metadata.
func elicitForm(rec elicitRecord, meta string) (slack.ModalViewRequest, error) {
	fields, err := slackui.ElicitFields(rec.Schema)
	if err != nil {
		return slack.ModalViewRequest{}, err
	}
	return slackui.ElicitForm(rec.Tool, rec.Message, fields, meta)
}
