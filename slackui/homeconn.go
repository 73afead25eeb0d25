package slackui

import (
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/mcpauth"
)

// The Home tab's connections: the MCP servers that run calls with the
// account of the person who asked (auth: requester), and whether the
// viewer has connected theirs, with a Revoke button for a connection and
// a Connect button where there is none. The buttons' value is the
// server's name and nothing else: whose connection a click acts on is
// the clicker's, never something the value says.

// Action IDs of the connections in the Home tab.
const (
	// ActionMCPRevoke revokes the clicker's connection to the server its
	// value names.
	ActionMCPRevoke = "mcp_revoke"
	// ActionMCPHomeConnect opens a modal that gives the clicker the
	// authorization URL of the server its value names (ConnectModal).
	ActionMCPHomeConnect = "mcp_home_connect"
	// BlockConnection is the ID prefix of a connection's block.
	BlockConnection = "mcp_connection"
	// HomeMaxConnections is how many servers the Home tab lists.
	HomeMaxConnections = 8
)

// homeConnections are the connections' blocks of a Home view.
func homeConnections(list []mcpauth.Personal) []slack.Block {
	if len(list) == 0 {
		return nil
	}
	blocks := []slack.Block{slack.NewDividerBlock(), HeaderBlock("Your connections"),
		ContextBlock("These MCP servers run the calls you ask for with your own account. Revoke a connection and your next call there asks you to connect again.")}
	for i, p := range list[:min(len(list), HomeMaxConnections)] {
		name := "*" + ClipText(slackEscape(OneLine(p.Server)), BudgetName) + "*"
		var text string
		var btn *slack.ButtonBlockElement
		if c := p.Connection; c == nil {
			text = name + "\nNot connected: a call there asks you first."
			btn = Button(ActionMCPHomeConnect, "Connect", p.Server, slack.StylePrimary)
		} else {
			text = name + "\n" + connectionLine(*c)
			btn = Button(ActionMCPRevoke, "Revoke", p.Server, slack.StyleDanger)
			btn.Confirm = slack.NewConfirmationBlockObject(PlainTextObject("Revoke this connection?"),
				mrkdwnText("Calls you ask for on "+name+" will ask you to connect again."),
				PlainTextObject("Revoke"), PlainTextObject("Cancel")).WithStyle(slack.StyleDanger)
		}
		blocks = append(blocks, slack.NewSectionBlock(mrkdwnText(text), nil, slack.NewAccessory(btn), slack.SectionBlockOptionBlockID(fmt.Sprintf("%s_%d", BlockConnection, i))))
	}
	if n := len(list) - HomeMaxConnections; n > 0 {
		blocks = append(blocks, ContextBlock(fmt.Sprintf("And %d more servers, not listed here.", n)))
	}
	return blocks
}

// connectionLine says since when a connection was made, with which
// scopes, and whether it renews itself.
func connectionLine(c mcpauth.Connection) string {
	if c.Connected.IsZero() {
		return "Connected, with a key this bot no longer has: revoke it and connect again."
	}
	parts := []string{"✅ Connected since " + Date(c.Connected)}
	if len(c.Scopes) > 0 {
		parts = append(parts, "scopes "+CodeSpan(strings.Join(c.Scopes, " ")))
	}
	if c.Refreshable {
		parts = append(parts, "renews itself")
	} else if !c.Expiry.IsZero() {
		parts = append(parts, "until "+Date(c.Expiry))
	}
	return strings.Join(parts, " · ")
}

// ConnectModal is the modal the Home tab's Connect opens: while the
// authorization request is made (authURL ""), a line that says so; then
// the Connect button that opens authURL, until expires.
func ConnectModal(server, authURL string, expires time.Time) slack.ModalViewRequest {
	view := slack.ModalViewRequest{Type: slack.VTModal, Title: PlainTextObject("Connect"), Close: PlainTextObject("Close")}
	name := "*" + ClipText(slackEscape(OneLine(server)), BudgetName) + "*"
	if authURL == "" {
		view.Blocks.BlockSet = []slack.Block{SectionBlock("Asking " + name + " for a sign-in page…")}
		return view
	}
	btn := Button(ActionMCPConnect, "Connect", server, slack.StylePrimary)
	btn.URL = authURL
	view.Blocks.BlockSet = []slack.Block{
		SectionBlock("Open " + name + "'s sign-in page and allow the connection, until " + Date(expires) + ". Your Home tab shows it once it is made."),
		slack.NewActionBlock(ActionMCPConnect, btn),
	}
	return view
}

// RevokedText says what became of a click on Revoke: had says there was
// a connection; personal that the server runs calls as people at all.
func RevokedText(server string, had, personal bool) string {
	name := ClipText(slackEscape(OneLine(server)), BudgetName)
	switch {
	case !personal:
		return "No MCP server of that name runs calls with your account: nothing was revoked."
	case !had:
		return "You had no connection to " + name + "."
	}
	return "Revoked your connection to " + name + ": your next call there asks you to connect again."
}

// ConnectedText says what became of a Connect in the Home tab.
func ConnectedText(server string, connected bool) string {
	name := ClipText(slackEscape(OneLine(server)), BudgetName)
	if !connected {
		return "No connection to " + name + " was made. Connect again to retry."
	}
	return "Connected to " + name + ": your calls there run with your account."
}
