package handlers

import (
	"encoding/json"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackui"
)

// The cards, modals and the Home view are package slackui's, as pure
// functions; the handlers post them, and dispatch clicks and submissions
// on the identifiers they carry. These are those identifiers, under the
// names the interaction handlers use.
const (
	ActionApprove    = slackui.ActionApprove
	ActionEdit       = slackui.ActionEdit
	ActionReject     = slackui.ActionReject
	ActionRetry      = slackui.ActionRetry
	ActionMarkDone   = slackui.ActionMarkDone
	ActionSkip       = slackui.ActionSkip
	ActionRetryRun   = slackui.ActionRetryRun
	ActionShowArgs   = slackui.ActionShowArgs
	ActionRestartRun = slackui.ActionRestartRun
	ActionCancelRun  = slackui.ActionCancelRun

	CallbackEdit   = slackui.CallbackEdit
	CallbackReject = slackui.CallbackReject

	BlockArgs        = slackui.BlockArgs
	InputArgs        = slackui.InputArgs
	BlockReason      = slackui.BlockReason
	InputReason      = slackui.InputReason
	BlockCallActions = slackui.BlockCallActions
)

// The text helpers of package slackui that the handlers' own messages
// (replies, copies, elicitations) are built with.
const (
	budgetName     = slackui.BudgetName
	budgetReason   = slackui.BudgetReason
	budgetMentions = slackui.BudgetMentions
	budgetError    = slackui.BudgetError
	budgetCardText = slackui.BudgetCardText
)

func slackEscape(s string) string                  { return slackui.MrkdwnInline(s) }
func clipText(s string, max int) string            { return slackui.ClipText(s, max) }
func oneLine(s string) string                      { return slackui.OneLine(s) }
func codeSpan(name string) string                  { return slackui.CodeSpan(name) }
func userMention(id string) string                 { return slackui.UserMention(id) }
func approverMention(id string) string             { return slackui.ApproverMention(id) }
func mentionList(ids []string, budget int) string  { return slackui.MentionList(ids, budget) }
func typedText(s string) string                    { return slackui.TypedText(s) }
func contextBlock(text string) *slack.ContextBlock { return slackui.ContextBlock(text) }
func channelMention(id string) string              { return slackui.ChannelMention(id) }

// The identifiers of elicitation messages and forms.
const (
	ActionElicitAnswer  = slackui.ActionElicitAnswer
	ActionElicitDecline = slackui.ActionElicitDecline
	ActionElicitCancel  = slackui.ActionElicitCancel
	CallbackElicit      = slackui.CallbackElicit
	ElicitActionID      = slackui.ElicitActionID
	ElicitBlockPrefix   = slackui.ElicitBlockPrefix
)

func elicitQuestion(requester, tool, message string) slack.Block {
	return slackui.ElicitQuestion(requester, tool, message)
}
func elicitFirstBlock(schema json.RawMessage) string { return slackui.ElicitFirstBlock(schema) }

// elicitForm is the form of rec's requested schema, its fields in the
// schema's order; meta is kept as the view's private metadata.
func elicitForm(rec elicitRecord, meta string) (slack.ModalViewRequest, error) {
	fields, err := slackui.ElicitFields(rec.Schema)
	if err != nil {
		return slack.ModalViewRequest{}, err
	}
	return slackui.ElicitForm(rec.Tool, rec.Message, fields, meta)
}

func checkingModal(actionID string) slack.ModalViewRequest { return slackui.CheckingModal(actionID) }
func noticeModal(actionID, text string) slack.ModalViewRequest {
	return slackui.NoticeModal(actionID, text)
}
