package mcpauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/countersign/countersign/tools"
)

// ErrNotPersonal: the server named does not run calls as the person who
// asked (auth: requester), or there is no such server, so there is no
// connection of a person's own to it to make or revoke.
var ErrNotPersonal = errors.New("no MCP server of that name runs calls as the person who asked")

// Personal is a server that runs calls as the person who asked, and that
// person's connection to it (nil when they have none).
type Personal struct {
	Server     string
	Connection *Connection
}

// Personal lists servers (those that run calls as the person who asked),
// sorted by name, each with user's connection to it, if any: what a
// person may see of their own connections. A connection sealed with
// another key is listed without its details, so that it can be revoked.
func (b *Broker) Personal(ctx context.Context, user string, servers []string) ([]Personal, error) {
	if user == "" || user == Service {
		return nil, fmt.Errorf("connections of %q: %w", user, ErrNotConnected)
	}
	mine, err := b.Connections(ctx, "", user)
	if err != nil {
		return nil, err
	}
	out := make([]Personal, 0, len(servers))
	for _, s := range slices.Sorted(slices.Values(servers)) {
		p := Personal{Server: s}
		for i := range mine {
			if mine[i].Server == s {
				p.Connection = &mine[i]
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// Connect makes id's connection to cfg's server ahead of any call (from
// the Home tab, say): the authorization the server would ask for at its
// first 401, started now, asking through prompter and waiting for the
// callback like a call would. It returns at once if id is connected.
func (b *Broker) Connect(ctx context.Context, cfg tools.MCPServer, id Identity, prompter Prompter) error {
	if ok, err := b.Connected(ctx, id); err != nil || ok {
		return err
	}
	h, err := b.Handler(cfg, id.User, prompter, tools.CallInfo{})
	if err != nil {
		return err
	}
	req, resp, err := b.challenge(ctx, cfg.URL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", id, err)
	}
	if err := h.Authorize(ctx, req, resp); err != nil {
		return fmt.Errorf("connect %s: %w", id, err)
	}
	if ok, err := b.Connected(ctx, id); err != nil || !ok {
		return fmt.Errorf("connect %s: %w", id, cmpErr(err, ErrNotConnected))
	}
	return nil
}

// challenge asks the server, without a token, what it wants (a ping):
// its 401 or 403 names its metadata and scopes. A server that answers
// otherwise (one that lets some requests through without a token) is
// taken as having said 401 without details: its metadata is looked for
// at the well-known addresses.
func (b *Broker) challenge(ctx context.Context, endpoint string) (*http.Request, *http.Response, error) {
	body := `{"jsonrpc":"2.0","id":"connect","method":"ping"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := b.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return req, resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return req, &http.Response{StatusCode: http.StatusUnauthorized, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}
