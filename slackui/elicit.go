package slackui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/tools"
)

// An elicitation's views: the thread message that asks the person who
// asked for the run for input (with the Answer, Decline and Cancel
// buttons), the form built from the requested schema, and the reading of
// a submitted form back into typed content. Package handlers runs the
// flow: who may answer, and how the answer reaches the waiting call.

// What an elicitation's message and its answers say.
const (
	TextElicitTimedOut = "⌛ Nobody answered in time; the request was cancelled."
	TextElicitAnswered = "This request is already answered or closed."
	TextElicitExpired  = "⌛ This request for input has expired; the call was not completed."
)

// ElicitOutcome is the line that ends an answered request's message.
func ElicitOutcome(action tools.ElicitAction, user string) string {
	switch action {
	case tools.ElicitAccept:
		return "✅ Answered by " + UserMention(user) + "."
	case tools.ElicitCancel:
		return "✖️ Cancelled by " + UserMention(user) + "."
	default:
		return "🚫 Declined by " + UserMention(user) + "."
	}
}

// ElicitNotYours tells someone that only the requester may answer.
func ElicitNotYours(requester string) string {
	return "Only " + UserMention(requester) + ", who asked for this turn, can answer this."
}

// ElicitNoForm says that the requested schema makes no form. The error
// quotes the server's schema (a property's name and type), so it is
// escaped: the server cannot put a link or a mention in the bot's words.
func ElicitNoForm(err error) string {
	return "I can't build a form for this request (" + errorText(err) + "). Decline or cancel it."
}

// ElicitFormNotOpened says that Slack did not open the form.
func ElicitFormNotOpened(err error) string {
	return "I couldn't open the form (" + errorText(err) + "). Please try again."
}

// errorText is an error inside a line of the bot's mrkdwn: on one line,
// escaped, and shortened.
func errorText(err error) string {
	return ClipText(slackEscape(OneLine(err.Error())), BudgetReason)
}

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

// ElicitText is the notification text of an elicitation message.
func ElicitText(tool, message string) string {
	return ClipText(MrkdwnInline(tool+" asks: "+OneLine(message)), BudgetCardText)
}

// ElicitQuestion is the question of an elicitation message.
func ElicitQuestion(requester, tool, message string) slack.Block {
	return SectionBlock(UserMention(requester) + ", " + CodeSpan(tool) + " asks for your input:\n> " +
		strings.ReplaceAll(ClipText(slackEscape(message), BudgetReason), "\n", "\n> "))
}

// ElicitMessage is the thread message that asks the requester for input,
// with the Answer, Decline and Cancel buttons; every button's value is id.
func ElicitMessage(requester, tool, message string, deadline time.Time, id string) []slack.Block {
	return []slack.Block{
		ElicitQuestion(requester, tool, message),
		ContextBlock("Only " + UserMention(requester) + " can answer. Without an answer by " + Date(deadline) + " the request is cancelled."),
		slack.NewActionBlock("elicit_actions",
			Button(ActionElicitAnswer, "Answer", id, slack.StylePrimary),
			Button(ActionElicitDecline, "Decline", id, slack.StyleDefault),
			Button(ActionElicitCancel, "Cancel", id, slack.StyleDanger),
		),
	}
}

// ElicitField is one property of a requested schema: what the form asks
// for it. A form shows its fields in the order it is given them, the
// order of the server's schema (ElicitFields keeps it).
type ElicitField struct {
	// Name is the property's name; Required says the schema requires
	// it. Neither is read from the property's own schema, where "name"
	// and "required" may mean something else (an object's required
	// properties).
	Name        string          `json:"-"`
	Type        string          `json:"type"`
	Format      string          `json:"format"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Enum        []any           `json:"enum"`
	EnumNames   []string        `json:"enumNames"`
	OneOf       []ElicitOption  `json:"oneOf"`
	AnyOf       []ElicitOption  `json:"anyOf"`
	Items       *ElicitField    `json:"items"`
	Default     json.RawMessage `json:"default"`
	Minimum     *float64        `json:"minimum"`
	Maximum     *float64        `json:"maximum"`
	Required    bool            `json:"-"`
}

// ElicitOption is one of a field's choices (oneOf or anyOf).
type ElicitOption struct {
	Const any    `json:"const"`
	Title string `json:"title"`
}

// ElicitFields reads a requested schema's properties, in the order the
// schema lists them.
func ElicitFields(schema json.RawMessage) ([]ElicitField, error) {
	var s struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var fields []ElicitField
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
		f := ElicitField{Name: fmt.Sprint(t)}
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
func (f ElicitField) options() []*slack.OptionBlockObject {
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
		out = append(out, slack.NewOptionBlockObject(ClipText(value, 150), PlainTextObject(ClipText(title, 75)), nil))
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

// ElicitForm is the modal that asks for the requested schema's values,
// one input per field in the order of fields: a text input per string, a
// date picker per string of format date, a date and time picker per
// string of format date-time, a number input per number or integer, a
// checkbox per boolean, a menu per enum, a multi-select per array of enum
// values. Other
// properties are not asked for. meta is kept as the view's private
// metadata.
func ElicitForm(tool, message string, fields []ElicitField, meta string) (slack.ModalViewRequest, error) {
	if len(fields) > maxElicitFields {
		return slack.ModalViewRequest{}, fmt.Errorf("%d fields are more than a form can show", len(fields))
	}
	// The server's message is quoted, every line, as in the thread's
	// question: none of its lines reads as the bot's.
	blocks := []slack.Block{SectionBlock(CodeSpan(tool) + " asks:\n> " +
		strings.ReplaceAll(ClipText(slackEscape(message), BudgetReason), "\n", "\n> "))}
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
		in := slack.NewInputBlock(ElicitBlockPrefix+f.Name, PlainTextObject(ClipText(label, 2000)), nil, el)
		if f.Description != "" {
			in.Hint = PlainTextObject(ClipText(f.Description, 2000))
		}
		in.Optional = !f.Required
		blocks = append(blocks, in)
	}
	return slack.ModalViewRequest{
		Type:            slack.VTModal,
		CallbackID:      CallbackElicit,
		Title:           PlainTextObject("Input needed"),
		Submit:          PlainTextObject("Send"),
		Close:           PlainTextObject("Not now"),
		PrivateMetadata: meta,
		Blocks:          slack.Blocks{BlockSet: blocks},
	}, nil
}

func elicitElement(f ElicitField) slack.BlockElement {
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
		yes := slack.NewOptionBlockObject("true", PlainTextObject("Yes"), nil)
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
	fields, err := ElicitFields(schema)
	if err != nil {
		return nil, map[string]string{ElicitFirstBlock(schema): err.Error()}
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
					block = ElicitFirstBlock(schema)
				}
				if problems[block] == "" {
					problems[block] = p.Message
				}
			}
			return nil, problems
		}
		return nil, map[string]string{ElicitFirstBlock(schema): err.Error()}
	}
	return content, nil
}

// ElicitFirstBlock is where a form's errors that belong to no one field
// are shown.
func ElicitFirstBlock(schema json.RawMessage) string {
	fields, _ := ElicitFields(schema)
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
