package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/slackui"
)

// The Home tab's connections (slackui.homeConnections): each person sees
// the MCP servers that run calls with their own account, may revoke
// their connection to one, and may connect ahead of any call. A button's
// value names a server and nothing else: the connection a click acts on
// is always the clicker's, as Slack's signed request names them.

// Connections are people's own connections to the MCP servers that run
// calls as the person who asked. Each method acts for user only. *bot.
// Connections is one; it must be safe for concurrent use.
type Connections interface {
	Personal(ctx context.Context, user string) ([]mcpauth.Personal, error)
	// Revoke reports whether user had a connection to server; it
	// wraps mcpauth.ErrNotPersonal for a server with no such
	// connections.
	Revoke(ctx context.Context, user, server string) (bool, error)
	// Connect returns once user is connected to server, asking through
	// prompter, or when the request expires.
	Connect(ctx context.Context, user, server string, prompter mcpauth.Prompter) error
}

// connectionAction handles Revoke and Connect in the Home tab, and
// reports whether the click was one of them.
func (s *Server) connectionAction(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback, action *slack.BlockAction) bool {
	if action.ActionID != slackui.ActionMCPRevoke && action.ActionID != slackui.ActionMCPHomeConnect {
		return false
	}
	h, user, server := s.home, cb.User.ID, action.Value
	if h == nil || h.conns == nil || cb.View.Type != slack.VTHomeTab {
		w.WriteHeader(http.StatusOK) // no such buttons are shown
		return true
	}
	log := s.log.WithFields(logrus.Fields{"user": user, "mcp_server": server, "action": action.ActionID})
	if action.ActionID == slackui.ActionMCPRevoke {
		w.WriteHeader(http.StatusOK)
		s.background(r.Context(), func(ctx context.Context) {
			had, err := h.conns.Revoke(ctx, user, server)
			notice := slackui.RevokedText(server, had, !errors.Is(err, mcpauth.ErrNotPersonal))
			if err != nil && !errors.Is(err, mcpauth.ErrNotPersonal) {
				log.WithError(err).Warn("revoking an MCP connection from the Home tab")
				notice = slackui.TextTryAgain
			}
			h.Publish(ctx, user, notice)
		})
		return true
	}
	view, err := s.api.OpenViewContext(r.Context(), cb.TriggerID, slackui.ConnectModal(server, "", time.Time{}))
	w.WriteHeader(http.StatusOK)
	if err != nil {
		log.WithError(err).Warn("opening the Connect modal")
		return true
	}
	// It waits for the person, up to the request's expiry: not in a
	// slot of the background work, but waited for at shutdown.
	s.work.Add(1)
	ctx := context.WithoutCancel(r.Context())
	go func() {
		defer s.work.Done()
		prompt := mcpauth.PrompterFunc(func(ctx context.Context, p mcpauth.Prompt) error {
			_, err := s.api.UpdateViewContext(ctx, slackui.ConnectModal(server, p.URL, p.Expires), "", "", view.ID)
			return err
		})
		err := h.conns.Connect(ctx, user, server, prompt)
		if err != nil {
			log.WithError(err).Info("no MCP connection made from the Home tab")
		}
		notice := slackui.ConnectedText(server, err == nil)
		if _, err := s.api.UpdateViewContext(ctx, slackui.NoticeModal(slackui.ActionMCPHomeConnect, notice), "", "", view.ID); err != nil {
			log.WithError(err).Debug("the Connect modal is gone")
		}
		h.Publish(ctx, user, notice)
	}()
	return true
}
