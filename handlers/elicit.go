package handlers

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

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

// Action and callback IDs of elicitation messages and forms.
const (
	ActionElicitAnswer  = "elicit_answer"
	ActionElicitDecline = "elicit_decline"
	ActionElicitCancel  = "elicit_cancel"
	CallbackElicit      = "elicit"
	// ElicitActionID is the action ID of every input of the form; the
	// block ID is ElicitBlockPrefix and the property's name.
	ElicitActionID    = "value"
	ElicitBlockPrefix = "field:"
)

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

// elicitSaved is a request's outcome, kept with it: the answer, or that
// nobody answered in time.
type elicitSaved struct {
	Answer  tools.ElicitAnswer `json:"answer"`
	Expired bool               `json:"expired,omitempty"`
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
// answer until ctx ends; then the message says that nobody answered. The
// same question of the same call, asked again by a later attempt, is the
// same request (see the top of this file).
func (e *Elicitor) Elicit(ctx context.Context, el tools.Elicitation) (tools.ElicitAnswer, error) {
	_, channel, root, err := ParseThread(el.Call.Thread)
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
		log.WithField("action", string(saved.Answer.Action)).Info("the call asked again; answered with the answer given before")
		return saved.Answer, nil
	case found:
		// Still waiting: the same message waits on, until the new deadline.
		rec.Deadline, rec.Attempt = deadline, el.Call.Attempt
		if err := e.save(ctx, id, rec, byCall, ttl); err != nil {
			return tools.ElicitAnswer{}, err
		}
		if rec.TS != "" {
			err := e.rep.retry(ctx, func() error {
				_, _, _, err := e.rep.api.UpdateMessageContext(ctx, channel, rec.TS, slack.MsgOptionText(elicitText(rec), false),
					slack.MsgOptionBlocks(ElicitMessage(rec.Requester, rec.Tool, rec.Message, rec.Deadline, id)...))
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
			slack.MsgOptionText(elicitText(rec), false), slack.MsgOptionBlocks(ElicitMessage(rec.Requester, rec.Tool, rec.Message, rec.Deadline, id)...))
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
		if first, derr := e.rep.store.Dedup(bg, elicitRef(id), ttl); derr == nil && first {
			raw, _ := json.Marshal(elicitSaved{Expired: true})
			if perr := e.rep.store.PutRef(bg, elicitAnswerRef(id), raw, ttl); perr != nil {
				log.WithError(perr).Warn("saving that a request for input expired")
			}
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
// same question, and its outcome if it has one. A request that expired is
// not used again.
func (e *Elicitor) earlier(ctx context.Context, byCall string, attempt int) (string, elicitRecord, *elicitSaved, bool) {
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
	raw, ok, err = e.rep.store.Ref(ctx, elicitAnswerRef(id))
	if err != nil {
		return "", rec, nil, false
	}
	if !ok {
		return id, rec, nil, true
	}
	var saved elicitSaved
	if json.Unmarshal(raw, &saved) != nil || saved.Expired {
		return "", rec, nil, false
	}
	return id, rec, &saved, true
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
	blocks := []slack.Block{elicitQuestion(rec.Requester, rec.Tool, rec.Message), contextBlock(line)}
	err := rep.retry(ctx, func() error {
		_, _, _, err := rep.api.UpdateMessageContext(ctx, channel, ts, slack.MsgOptionText(elicitText(rec), false), slack.MsgOptionBlocks(blocks...))
		return err
	})
	if err != nil {
		rep.log.WithError(err).Warn("updating an elicitation message")
	}
}

func elicitRef(id string) string { return "elicit:" + id }

// elicitAnswerRef keeps a request's outcome (elicitSaved).
func elicitAnswerRef(id string) string { return "elicit-answer:" + id }

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

func elicitText(rec elicitRecord) string {
	return clipText(slackEscape(rec.Tool+" asks: "+oneLine(rec.Message)), budgetCardText)
}

func elicitQuestion(requester, tool, message string) slack.Block {
	return sectionBlock(userMention(requester) + ", " + codeSpan(tool) + " asks for your input:\n> " +
		strings.ReplaceAll(clipText(slackEscape(message), budgetReason), "\n", "\n> "))
}

// ElicitMessage is the thread message that asks the requester for input,
// with the Answer, Decline and Cancel buttons; every button's value is id.
func ElicitMessage(requester, tool, message string, deadline time.Time, id string) []slack.Block {
	return []slack.Block{
		elicitQuestion(requester, tool, message),
		contextBlock("Only " + userMention(requester) + " can answer. Without an answer by " + slackDate(deadline) + " the request is cancelled."),
		slack.NewActionBlock("elicit_actions",
			buttonElement(ActionElicitAnswer, "Answer", id, slack.StylePrimary),
			buttonElement(ActionElicitDecline, "Decline", id, slack.StyleDefault),
			buttonElement(ActionElicitCancel, "Cancel", id, slack.StyleDanger),
		),
	}
}

// elicitAction handles the buttons of an elicitation message, and
// reports whether the click was one of them.
func (s *Server) elicitAction(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback) bool {
	if len(cb.ActionCallback.BlockActions) == 0 {
		return false
	}
	action := cb.ActionCallback.BlockActions[0]
	switch action.ActionID {
	case ActionElicitAnswer, ActionElicitDecline, ActionElicitCancel:
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
	if action.ActionID == ActionElicitAnswer {
		view, err := ElicitForm(rec.Tool, rec.Message, rec.Schema, action.Value+"|"+cb.Message.Timestamp)
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
	line := "🚫 Declined by " + userMention(cb.User.ID) + "."
	if action.ActionID == ActionElicitCancel {
		ans.Action, line = tools.ElicitCancel, "✖️ Cancelled by "+userMention(cb.User.ID)+"."
	}
	answer(s.deliverElicitation(ctx, action.Value, rec, ans, cb.Channel.ID, cb.Message.Timestamp, line))
	return true
}

// elicitSubmission handles the elicitation form, and reports whether the
// submission was one.
func (s *Server) elicitSubmission(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback) bool {
	if cb.View.CallbackID != CallbackElicit {
		return false
	}
	ctx := r.Context()
	id, ts, _ := strings.Cut(cb.View.PrivateMetadata, "|")
	rec, msg := s.openElicitation(ctx, id, cb.User.ID)
	if msg != "" {
		writeJSON(w, slack.NewErrorsViewSubmissionResponse(map[string]string{elicitFirstBlock(rec.Schema): msg}))
		return true
	}
	content, problems := ElicitContent(rec.Schema, cb.View.State)
	if len(problems) > 0 {
		writeJSON(w, slack.NewErrorsViewSubmissionResponse(problems))
		return true
	}
	_, channel, _, _ := ParseThread(rec.Thread)
	ans := tools.ElicitAnswer{Action: tools.ElicitAccept, Content: content, By: cb.User.ID}
	if msg := s.deliverElicitation(ctx, id, rec, ans, channel, ts, "✅ Answered by "+userMention(cb.User.ID)+"."); msg != "" {
		writeJSON(w, slack.NewErrorsViewSubmissionResponse(map[string]string{elicitFirstBlock(rec.Schema): msg}))
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
		return rec, textNotPending
	}
	raw, ok, err := s.store.Ref(ctx, elicitRef(id))
	switch {
	case err != nil:
		s.log.WithError(err).Error("looking up an elicitation")
		return rec, textTryAgain
	case !ok || json.Unmarshal(raw, &rec) != nil:
		return rec, textNotPending
	case user != rec.Requester:
		return rec, "Only " + userMention(rec.Requester) + ", who asked for this turn, can answer this."
	}
	return rec, ""
}

// deliverElicitation sends the first answer to the waiting call and
// updates the message; a later answer changes nothing.
func (s *Server) deliverElicitation(ctx context.Context, id string, rec elicitRecord, ans tools.ElicitAnswer, channel, ts, line string) string {
	ttl := time.Until(rec.Deadline) + elicitTTL
	first, err := s.store.Dedup(ctx, elicitRef(id), ttl)
	if err != nil {
		s.log.WithError(err).Error("claiming an elicitation answer")
		return textTryAgain
	}
	if !first {
		return "This request is already answered or closed."
	}
	// Kept with the request, for an attempt of the call that asks again
	// after the one waiting died; then sent to the one waiting.
	saved, _ := json.Marshal(elicitSaved{Answer: ans})
	if err := s.store.PutRef(ctx, elicitAnswerRef(id), saved, ttl); err != nil {
		s.log.WithError(err).Error("saving an elicitation answer")
		return textTryAgain
	}
	raw, _ := json.Marshal(ans)
	if err := s.opts.Mailbox.Deliver(ctx, elicitRef(id), raw, ttl); err != nil {
		s.log.WithError(err).Error("delivering an elicitation answer")
		return textTryAgain
	}
	s.log.WithFields(logrus.Fields{"thread": rec.Thread, "tool": rec.Tool, "action": string(ans.Action)}).Info("elicitation answered")
	if ts != "" {
		rep := &Reporter{api: s.api, store: s.store, now: s.opts.Now, log: s.log}
		s.background(ctx, func(ctx context.Context) { settleElicitation(ctx, rep, channel, ts, rec, line) })
	}
	return ""
}

// elicitField is one property of a requested schema.
type elicitField struct {
	Name        string
	Type        string          `json:"type"`
	Format      string          `json:"format"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Enum        []any           `json:"enum"`
	EnumNames   []string        `json:"enumNames"`
	OneOf       []elicitOption  `json:"oneOf"`
	AnyOf       []elicitOption  `json:"anyOf"`
	Items       *elicitField    `json:"items"`
	Default     json.RawMessage `json:"default"`
	Minimum     *float64        `json:"minimum"`
	Maximum     *float64        `json:"maximum"`
	Required    bool
}

type elicitOption struct {
	Const any    `json:"const"`
	Title string `json:"title"`
}

// elicitFields reads a requested schema's properties, in their order.
func elicitFields(schema json.RawMessage) ([]elicitField, error) {
	var s struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var fields []elicitField
	if len(s.Properties) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(s.Properties))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("schema: properties is not an object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("schema: %w", err)
		}
		f := elicitField{Name: fmt.Sprint(t)}
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("schema: property %s: %w", f.Name, err)
		}
		for _, r := range s.Required {
			f.Required = f.Required || r == f.Name
		}
		fields = append(fields, f)
	}
	return fields, nil
}

// options are a field's choices: enum (with enumNames), or oneOf/anyOf
// entries of const and title; for an array, its items'.
func (f elicitField) options() []*slack.OptionBlockObject {
	src := f
	if f.Type == "array" && f.Items != nil {
		src = *f.Items
	}
	var out []*slack.OptionBlockObject
	add := func(v any, title string) {
		value := fmt.Sprint(v)
		if title == "" {
			title = value
		}
		out = append(out, slack.NewOptionBlockObject(clipText(value, 150), plainText(clipText(title, 75)), nil))
	}
	for i, v := range src.Enum {
		title := ""
		if i < len(src.EnumNames) {
			title = src.EnumNames[i]
		}
		add(v, title)
	}
	for _, o := range append(src.OneOf, src.AnyOf...) {
		add(o.Const, o.Title)
	}
	return out
}

// maxElicitFields keeps the form within Slack's 100 blocks.
const maxElicitFields = 90

// ElicitForm is the modal that asks for the requested schema's values, in
// the order of the schema's properties: a text input per string, a date
// picker per string of format date, a date and time picker per string of
// format date-time, a number input per number or integer, a checkbox per
// boolean, a menu per enum, a multi-select per array of enum values.
// Other properties are not asked for. meta is kept as the view's private
// metadata.
func ElicitForm(tool, message string, schema json.RawMessage, meta string) (slack.ModalViewRequest, error) {
	fields, err := elicitFields(schema)
	if err != nil {
		return slack.ModalViewRequest{}, err
	}
	if len(fields) > maxElicitFields {
		return slack.ModalViewRequest{}, fmt.Errorf("%d fields are more than a form can show", len(fields))
	}
	blocks := []slack.Block{sectionBlock(codeSpan(tool) + " asks:\n" + clipText(slackEscape(message), budgetReason))}
	for _, f := range fields {
		el := elicitElement(f)
		if el == nil {
			if f.Required {
				return slack.ModalViewRequest{}, fmt.Errorf("field %q of type %q cannot be asked in a form", f.Name, f.Type)
			}
			continue
		}
		label := f.Title
		if label == "" {
			label = f.Name
		}
		in := slack.NewInputBlock(ElicitBlockPrefix+f.Name, plainText(clipText(label, 2000)), nil, el)
		if f.Description != "" {
			in.Hint = plainText(clipText(f.Description, 2000))
		}
		in.Optional = !f.Required
		blocks = append(blocks, in)
	}
	return slack.ModalViewRequest{
		Type:            slack.VTModal,
		CallbackID:      CallbackElicit,
		Title:           plainText("Input needed"),
		Submit:          plainText("Send"),
		Close:           plainText("Not now"),
		PrivateMetadata: meta,
		Blocks:          slack.Blocks{BlockSet: blocks},
	}, nil
}

func elicitElement(f elicitField) slack.BlockElement {
	opts := f.options()
	switch {
	case f.Type == "array" && len(opts) > 0:
		el := slack.NewOptionsMultiSelectBlockElement(slack.MultiOptTypeStatic, nil, ElicitActionID, opts...)
		var defs []string
		if json.Unmarshal(f.Default, &defs) == nil {
			for _, d := range defs {
				for _, o := range opts {
					if o.Value == d {
						el.InitialOptions = append(el.InitialOptions, o)
					}
				}
			}
		}
		return el
	case len(opts) > 0:
		el := slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, nil, ElicitActionID, opts...)
		var def any
		if json.Unmarshal(f.Default, &def) == nil && def != nil {
			for _, o := range opts {
				if o.Value == fmt.Sprint(def) {
					el.InitialOption = o
				}
			}
		}
		return el
	case f.Type == "string" && f.Format == "date":
		el := slack.NewDatePickerBlockElement(ElicitActionID)
		var def string
		if json.Unmarshal(f.Default, &def) == nil {
			el.InitialDate = def
		}
		return el
	case f.Type == "string" && f.Format == "date-time":
		el := slack.NewDateTimePickerBlockElement(ElicitActionID)
		var def string
		if json.Unmarshal(f.Default, &def) == nil {
			if t, err := time.Parse(time.RFC3339, def); err == nil {
				el.InitialDateTime = t.Unix()
			}
		}
		return el
	case f.Type == "string":
		el := slack.NewPlainTextInputBlockElement(nil, ElicitActionID)
		var def string
		if json.Unmarshal(f.Default, &def) == nil {
			el.InitialValue = def
		}
		return el
	case f.Type == "number", f.Type == "integer":
		el := slack.NewNumberInputBlockElement(nil, ElicitActionID, f.Type == "number")
		if len(f.Default) > 0 {
			el.InitialValue = string(f.Default)
		}
		if f.Minimum != nil {
			el.MinValue = strconv.FormatFloat(*f.Minimum, 'f', -1, 64)
		}
		if f.Maximum != nil {
			el.MaxValue = strconv.FormatFloat(*f.Maximum, 'f', -1, 64)
		}
		return el
	case f.Type == "boolean":
		yes := slack.NewOptionBlockObject("true", plainText("Yes"), nil)
		el := slack.NewCheckboxGroupsBlockElement(ElicitActionID, yes)
		if string(f.Default) == "true" {
			el.InitialOptions = []*slack.OptionBlockObject{yes}
		}
		return el
	}
	return nil
}

// ElicitContent reads a submitted form into the answer's content, typed
// as the schema says, and checks it against the schema. Problems are
// keyed by block ID, for the form's inline errors.
func ElicitContent(schema json.RawMessage, state *slack.ViewState) (map[string]any, map[string]string) {
	fields, err := elicitFields(schema)
	if err != nil {
		return nil, map[string]string{elicitFirstBlock(schema): err.Error()}
	}
	content := map[string]any{}
	problems := map[string]string{}
	for _, f := range fields {
		block := ElicitBlockPrefix + f.Name
		var a slack.BlockAction
		if state != nil {
			a = state.Values[block][ElicitActionID]
		}
		switch {
		case f.Type == "array":
			var vs []string
			for _, o := range a.SelectedOptions {
				vs = append(vs, o.Value)
			}
			if len(vs) > 0 {
				content[f.Name] = vs
			}
		case f.Type == "boolean":
			if len(f.options()) == 0 {
				content[f.Name] = len(a.SelectedOptions) > 0
				continue
			}
			fallthrough
		default:
			v := a.Value
			switch {
			case a.SelectedOption.Value != "":
				v = a.SelectedOption.Value
			case a.SelectedDate != "":
				v = a.SelectedDate
			case a.SelectedDateTime != 0:
				v = time.Unix(a.SelectedDateTime, 0).UTC().Format(time.RFC3339)
			}
			if v == "" {
				continue
			}
			switch f.Type {
			case "number":
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					problems[block] = "Enter a number."
					continue
				}
				content[f.Name] = n
			case "integer":
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					problems[block] = "Enter a whole number."
					continue
				}
				content[f.Name] = n
			default:
				content[f.Name] = v
			}
		}
	}
	if len(problems) > 0 {
		return nil, problems
	}
	raw, _ := json.Marshal(content)
	if err := validateAgainst(schema, raw); err != nil {
		var aerr *tools.ArgsError
		if errors.As(err, &aerr) {
			for _, p := range aerr.Problems {
				name, _, _ := strings.Cut(p.Path, ".")
				block := ElicitBlockPrefix + name
				if name == "" {
					block = elicitFirstBlock(schema)
				}
				if problems[block] == "" {
					problems[block] = p.Message
				}
			}
			return nil, problems
		}
		return nil, map[string]string{elicitFirstBlock(schema): err.Error()}
	}
	return content, nil
}

// elicitFirstBlock is where a form's errors that belong to no one field
// are shown.
func elicitFirstBlock(schema json.RawMessage) string {
	fields, _ := elicitFields(schema)
	for _, f := range fields {
		if elicitElement(f) != nil {
			return ElicitBlockPrefix + f.Name
		}
	}
	return ElicitBlockPrefix
}

// validateAgainst checks content against a requested schema with the
// tools package's validator, which words problems for people.
func validateAgainst(schema, content json.RawMessage) error {
	reg, err := tools.NewRegistry(tools.DefaultPolicy(), schemaOnly{schema})
	if err != nil {
		return nil // a schema the validator refuses: the server checks
	}
	return reg.Validate(schemaOnly{}.Name(), content)
}

// schemaOnly is a tool that is nothing but a schema, to validate with.
type schemaOnly struct{ schema json.RawMessage }

func (schemaOnly) Name() string                                          { return "elicitation" }
func (schemaOnly) Description() string                                   { return "" }
func (s schemaOnly) Schema() json.RawMessage                             { return s.schema }
func (schemaOnly) Idempotent(json.RawMessage) bool                       { return true }
func (schemaOnly) Call(context.Context, json.RawMessage) (string, error) { return "", nil }
