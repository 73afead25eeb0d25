package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/tools"
)

// A server that offers resources gets one more tool, <server>__read_resource
// (ReadResourceTool), through which the model reads a resource by its URI:
// one that a result linked to (resource_link) or embedded. It is a tool of
// the server like the others: the policy's rule for its name, else the
// server's, says who approves a read (by default, someone must), the card
// shows the URI, and with trust_annotations it counts as read-only, as
// resources/read is.

// ReadResourceTool is the server's own name for the read tool; the model
// sees it as ToolName(server, ReadResourceTool).
const ReadResourceTool = "read_resource"

var readResourceSchema = json.RawMessage(`{"type":"object","properties":{"uri":{"type":"string","description":"The resource's URI, as a result gave it."}},"required":["uri"],"additionalProperties":false}`)

// readTool is the read tool of srv.
func readTool(srv *server) *tool {
	return &tool{srv: srv, name: ToolName(srv.cfg.Name, ReadResourceTool), read: true, schema: readResourceSchema,
		remote: &sdk.Tool{
			Name: ReadResourceTool,
			Description: "Reads a resource of the MCP server " + srv.cfg.Name + " by its URI: one that a result of its tools " +
				"linked to or embedded. Text comes back as it is; binary content as its type and size.",
			Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
		}}
}

// offersResources reports whether the session's server said it has
// resources.
func offersResources(cs *sdk.ClientSession) bool {
	res := cs.InitializeResult()
	return res != nil && res.Capabilities != nil && res.Capabilities.Resources != nil
}

// readResource reads the resource the arguments name.
func (t *tool) readResource(ctx context.Context, sess *session, args json.RawMessage) (string, error) {
	var a struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(args, &a); err != nil || strings.TrimSpace(a.URI) == "" {
		return "", errors.New("read_resource needs the resource's uri")
	}
	res, err := sess.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: a.URI})
	switch {
	case err == nil:
	case errors.Is(context.Cause(ctx), errCallTimeout), errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "", fmt.Errorf("MCP server %q did not answer within %s", t.srv.cfg.Name, t.srv.cfg.Timeout)
	case errors.Is(err, sdk.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), sess.closed():
		return "", fmt.Errorf("MCP server %q stopped during the read: %w", t.srv.cfg.Name, ErrUnavailable)
	default:
		return "", fmt.Errorf("MCP server %q: %w", t.srv.cfg.Name, t.srv.cfg.Secrets.RedactError(err))
	}
	var parts []string
	for _, c := range res.Contents {
		if c == nil {
			continue
		}
		parts = append(parts, contentText(&sdk.EmbeddedResource{Resource: c}, ""))
	}
	if len(parts) == 0 {
		return "(the resource is empty)", nil
	}
	return tools.CapText(strings.Join(parts, "\n"), t.srv.m.opts.MaxResult), nil
}
