package elicit

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/slackui"
)

// Connecting to an MCP server (auth: requester): when a call runs as the
// person who asked for it and they have no connection to its server, the
// thread tells them — them only, in an ephemeral message — with a Connect
// button that opens the authorization server's page. The server sends
// the browser back to the bot's GET /oauth/callback, on any replica,
// which completes the connection (mcpauth.Broker.Complete) and shows a
// page that says so; the waiting call goes on. The callback page shows
// neither the code nor a token, and the request is never logged with its
// query.

// ConnectPrompter asks people in Slack threads to connect to an MCP
// server. It is an mcpauth.Prompter, safe for concurrent use.
type ConnectPrompter struct {
	api *slack.Client
	log logrus.FieldLogger
}

var _ mcpauth.Prompter = (*ConnectPrompter)(nil)

// NewConnectPrompter returns a ConnectPrompter that posts through api.
func NewConnectPrompter(api *slack.Client, log logrus.FieldLogger) *ConnectPrompter {
	if log == nil {
		l := logrus.New()
		l.Out = io.Discard
		log = l
	}
	return &ConnectPrompter{api: api, log: log}
}

// ErrNoThread is wrapped by the error of a prompt for a call without a
// Slack thread to ask in.
var ErrNoThread = errors.New("no Slack thread to ask in")

// PromptConnect posts the Connect button, in the call's thread, to the
// person whose connection is missing.
func (c *ConnectPrompter) PromptConnect(ctx context.Context, p mcpauth.Prompt) error {
	_, channel, root, err := slackui.ParseThread(p.Call.Thread)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoThread, err)
	}
	if p.Identity.User == "" || p.Identity.User == mcpauth.Service {
		return fmt.Errorf("%w: the bot's own connection is made with bot mcp connect", ErrNoThread)
	}
	blocks := slackui.ConnectBlocks(p.Identity.Server, p.URL, p.Expires)
	_, err = c.api.PostEphemeralContext(ctx, channel, p.Identity.User, slack.MsgOptionTS(root),
		slack.MsgOptionText(slackui.ConnectText(p.Identity.Server), false), slack.MsgOptionBlocks(blocks...))
	if err != nil {
		return fmt.Errorf("post connect prompt: %w", err)
	}
	c.log.WithFields(logrus.Fields{"thread": p.Call.Thread, "call": p.Call.Call, "user": p.Identity.User, "mcp_server": p.Identity.Server}).Info("asked the requester to connect")
	return nil
}
