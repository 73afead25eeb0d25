package handlers

import (
	"bytes"
	"context"
	"crypto/rand"
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
	_, channel, root, err := ParseThread(el.Call.Thread)
	if err != nil {
		return tools.ElicitAnswer{}, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(24 * time.Hour)
	}
	rec := elicitRecord{Thread: el.Call.Thread, Requester: el.Call.Requester, Tool: el.Tool, Message: el.Message, Schema: el.Schema, Deadline: deadline}
	raw, _ := json.Marshal(rec)
	id, err := randomID()
	if err != nil {
		return tools.ElicitAnswer{}, err
	}
	ttl := time.Until(deadline) + elicitTTL
	if err := e.rep.store.PutRef(ctx, elicitRef(id), raw, ttl); err != nil {
		return tools.ElicitAnswer{}, fmt.Errorf("store elicitation: %w", err)
	}
	log := e.log.WithFields(logrus.Fields{"thread": el.Call.Thread, "call": el.Call.Call, "tool": el.Tool})
	ts, err := e.rep.post(ctx, channel, slack.MsgOptionTS(root),
		slack.MsgOptionText(elicitText(rec), false), slack.MsgOptionBlocks(ElicitMessage(rec.Requester, rec.Tool, rec.Message, rec.Deadline, id)...))
	if err != nil {
		return tools.ElicitAnswer{}, fmt.Errorf("post elicitation: %w", err)
	}
	log.Info("asked the requester for input")
	data, err := e.mail.Receive(ctx, elicitRef(id))
	if err != nil {
		// Whoever answers now is told it is too late.
		bg := context.WithoutCancel(ctx)
		if first, derr := e.rep.store.Dedup(bg, elicitRef(id), ttl); derr == nil && first {
			e.settle(bg, channel, ts, rec, "⌛ Nobody answered in time; the request was cancelled.")
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
