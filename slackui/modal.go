package slackui

import "github.com/slack-go/slack"

// The modals a card's button opens at once, before its checks are done
// (package handlers opens them within the click's three seconds and
// replaces them): the form itself is EditModal, RejectModal or ArgsModal.

// modalTitle is the title of the modal a button opens.
func modalTitle(actionID string) string {
	switch actionID {
	case ActionEdit:
		return "Edit arguments"
	case ActionReject:
		return "Reject call"
	case ActionMCPHomeConnect:
		return "Connect"
	}
	return "All arguments"
}

// CheckingModal is the modal a button opens while its checks are slow:
// nothing to submit, only a note that they are under way.
func CheckingModal(actionID string) slack.ModalViewRequest {
	view := slack.ModalViewRequest{Type: slack.VTModal, Title: PlainTextObject(modalTitle(actionID)), Close: PlainTextObject("Cancel")}
	view.Blocks.BlockSet = []slack.Block{SectionBlock("Checking the call…")}
	return view
}

// NoticeModal replaces the checking modal when there is no form to show:
// it says why (mrkdwn, as the answer to a click would).
func NoticeModal(actionID, text string) slack.ModalViewRequest {
	view := slack.ModalViewRequest{Type: slack.VTModal, Title: PlainTextObject(modalTitle(actionID)), Close: PlainTextObject("Close")}
	view.Blocks.BlockSet = []slack.Block{SectionBlock(text)}
	return view
}
