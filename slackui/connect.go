package slackui

import (
	"fmt"
	"time"

	"github.com/slack-go/slack"
)

// ActionMCPConnect is the action ID of the Connect button. It opens a URL;
// Slack still reports the click, which is acknowledged and nothing else.
const ActionMCPConnect = "mcp_connect"

// ConnectText is the text of the message that asks a person to connect
// to server.
func ConnectText(server string) string {
	return fmt.Sprintf("A call waits for your connection to %s.", server)
}

// ConnectBlocks is the ephemeral message that asks a person to connect.
func ConnectBlocks(server, authURL string, expires time.Time) []slack.Block {
	text := fmt.Sprintf("A call you asked for runs with your own account on *%s*, and you have not connected it yet. "+
		"It waits until %s: connect, and it goes on.", MrkdwnInline(server), Date(expires))
	btn := slack.NewButtonBlockElement(ActionMCPConnect, server, slack.NewTextBlockObject(slack.PlainTextType, "Connect", false, false))
	btn.URL = authURL
	btn.Style = slack.StylePrimary
	return []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil),
		slack.NewActionBlock("mcp_connect", btn),
	}
}
