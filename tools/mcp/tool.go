package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/tools"
)

// IdempotencyKeyMeta is the key in a tools/call request's _meta that
// carries the call's idempotency key: the same for every request of one
// attempt of one call, different for the next attempt, so a server that
// honours it runs each attempt once.
const IdempotencyKeyMeta = "countersign/idempotency-key"

// IdempotencyKey is the key of one attempt of one call of a thread.
func IdempotencyKey(info tools.CallInfo) string {
	sum := sha256.Sum256([]byte(info.Thread + "\x00" + info.Call + "\x00" + strconv.Itoa(info.Attempt)))
	return hex.EncodeToString(sum[:16])
}

// tool is one tool of an MCP server, as the model sees it. It is safe
// for concurrent use.
type tool struct {
	srv    *server
	name   string // <server>__<tool>, as offered
	remote *sdk.Tool
	schema json.RawMessage
	read   bool   // the server's read tool (see resources.go)
	ver    string // see Version
}

var (
	_ tools.InfoTool      = (*tool)(nil)
	_ tools.ReadOnlyTool  = (*tool)(nil)
	_ tools.OriginTool    = (*tool)(nil)
	_ tools.Checker       = (*tool)(nil)
	_ tools.VersionedTool = (*tool)(nil)
	_ tools.ImageTool     = (*tool)(nil)
)

func newTool(srv *server, t *sdk.Tool) (*tool, error) {
	schema, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	if t.InputSchema == nil {
		// An object without "properties" is refused by OpenAI.
		schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return &tool{srv: srv, name: ToolName(srv.cfg.Name, t.Name), remote: t, schema: schema, ver: toolVersion(t, schema)}, nil
}

// toolVersion hashes what a person deciding a call of t is shown and what
// the call runs against: its name at the server, its title and
// description, its input schema and its annotations, each in canonical
// JSON (object keys sorted), so that the same definition listed again,
// by this process or another, has the same version.
func toolVersion(t *sdk.Tool, schema json.RawMessage) string {
	var v any
	if json.Unmarshal(schema, &v) != nil {
		v = string(schema)
	}
	def, err := json.Marshal(map[string]any{
		"name": t.Name, "title": t.Title, "description": t.Description, "input_schema": v, "annotations": t.Annotations,
	})
	if err != nil {
		def = []byte(fmt.Sprintf("%q %q %q %s", t.Name, t.Title, t.Description, schema))
	}
	sum := sha256.Sum256(def)
	return hex.EncodeToString(sum[:12])
}

// Version identifies the tool's definition (tools.VersionedTool): a call
// approved under one version does not run under another. The read tool
// is the bot's own and has none.
func (t *tool) Version() string { return t.ver }

func (t *tool) Name() string { return t.name }

func (t *tool) Description() string {
	if t.remote.Description != "" {
		return t.remote.Description
	}
	if a := t.remote.Annotations; a != nil && a.Title != "" {
		return a.Title
	}
	return t.remote.Title
}

func (t *tool) Schema() json.RawMessage { return t.schema }

// Idempotent: only a trusted server's word counts.
func (t *tool) Idempotent(json.RawMessage) bool {
	a := t.remote.Annotations
	return t.srv.cfg.TrustAnnotations && a != nil && (a.IdempotentHint || a.ReadOnlyHint)
}

// ReadOnly: only a trusted server's word counts.
func (t *tool) ReadOnly() bool {
	a := t.remote.Annotations
	return t.srv.cfg.TrustAnnotations && a != nil && a.ReadOnlyHint
}

func (t *tool) Origin() tools.Origin {
	o := tools.Origin{Server: t.srv.cfg.Name, Tool: t.remote.Name, Trusted: t.srv.cfg.TrustAnnotations}
	if a := t.remote.Annotations; a != nil {
		if a.ReadOnlyHint {
			o.Hints = append(o.Hints, "read-only")
		}
		if a.IdempotentHint {
			o.Hints = append(o.Hints, "idempotent")
		}
		if a.DestructiveHint != nil && *a.DestructiveHint && !a.ReadOnlyHint {
			o.Hints = append(o.Hints, "destructive")
		}
		if a.OpenWorldHint != nil && *a.OpenWorldHint {
			o.Hints = append(o.Hints, "open world")
		}
	}
	return o
}

// Check refuses a call while the server is down, so that the model is
// told at once and nobody is asked to approve a call that cannot run.
func (t *tool) Check(json.RawMessage) error {
	_, err := t.srv.session()
	return err
}

// Call runs the tool without a call to name: no idempotency key and no
// one to ask for input.
func (t *tool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	return t.CallWithInfo(ctx, tools.CallInfo{}, args)
}

// CallWithInfo calls the tool on its server, within the server's timeout.
// An isError result, a timeout and a transport failure are errors for
// the model; a server that dies during the call gives an error wrapping
// tools.ErrOutcomeUnknown. Images in the result are lines of its text.
func (t *tool) CallWithInfo(ctx context.Context, info tools.CallInfo, args json.RawMessage) (string, error) {
	text, _, err := t.CallWithImages(ctx, info, args)
	return text, err
}

// CallWithImages is CallWithInfo with the images of the result that the
// model may be shown (see resultContent).
func (t *tool) CallWithImages(ctx context.Context, info tools.CallInfo, args json.RawMessage) (string, []tools.Image, error) {
	sess, release, timeout, err := t.srv.sessionFor(ctx, info, t.name, args)
	if err != nil {
		return "", nil, err
	}
	defer release()
	ctx, dl, cancel := withDeadline(ctx, timeout)
	defer cancel()
	token := newProgressToken()
	done := t.srv.track(&inflight{info: info, tool: t.name, token: token, dl: dl})
	defer done()

	if t.read {
		text, err := t.readResource(ctx, sess, args)
		return text, nil, err
	}
	params := &sdk.CallToolParams{Name: t.remote.Name, Arguments: args}
	if info.Thread != "" {
		params.Meta = sdk.Meta{IdempotencyKeyMeta: IdempotencyKey(info)}
	}
	params.SetProgressToken(token)
	if in := info.Input; in != nil {
		params.InputResponses, params.RequestState = inputResponses(in.Answers), in.State
	}
	t.srv.log.WithFields(logrus.Fields{"tool": t.name, "thread": info.Thread, "call": info.Call, "attempt": info.Attempt}).Debug("calling MCP tool")
	sendCtx, note := withPostNote(ctx)
	res, err := t.send(sendCtx, sess, info, params)
	if sessionLost(err, note) && t.srv.cfg.Auth != tools.AuthRequester {
		// The server forgot the shared session before it took the call
		// (session.go): the call did not run; send it in the next one.
		t.srv.log.WithFields(logrus.Fields{"tool": t.name, "thread": info.Thread, "call": info.Call}).Info("MCP server forgot the session before it took the call; sending the call in a new session")
		if note.sessionRefused.Load() {
			// HTTP+SSE: the SDK ends the connection once nothing else
			// is in flight in it; nothing in a session the server
			// forgot will be answered, so it ends now.
			_ = sess.cs.Close()
		}
		if sess, err = t.srv.nextSession(ctx, sess); err != nil {
			return "", nil, err
		}
		sendCtx, note = withPostNote(ctx)
		res, err = t.send(sendCtx, sess, info, params)
	}
	var paused *tools.ConnectRequiredError
	switch {
	case err == nil:
	case errors.As(err, &paused):
		return "", nil, paused // nothing was sent
	case errors.Is(context.Cause(ctx), errCallTimeout), errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "", nil, fmt.Errorf("MCP server %q did not answer within %s; the call may or may not have had its effect", t.srv.cfg.Name, t.srv.cfg.Timeout)
	case sessionLost(err, note):
		return "", nil, fmt.Errorf("MCP server %q: %w before it took the call; the call was not run", t.srv.cfg.Name, ErrSessionLost)
	case errors.Is(err, sdk.ErrSessionMissing):
		// It took the call, then forgot the session.
		return "", nil, fmt.Errorf("MCP server %q forgot the session during the call: %w", t.srv.cfg.Name, tools.ErrOutcomeUnknown)
	case note.answeredError.Load() && !errors.Is(err, sdk.ErrConnectionClosed) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
		// The server answered the call's POST with an error (its words
		// are in err): it refused the call. The SDK may have closed the
		// connection since (HTTP+SSE), which does not make it a call
		// cut off.
		return "", nil, fmt.Errorf("MCP server %q: %w", t.srv.cfg.Name, t.srv.cfg.Secrets.RedactError(err))
	case errors.Is(err, sdk.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), sess.closed():
		return "", nil, fmt.Errorf("MCP server %q stopped during the call: %w", t.srv.cfg.Name, tools.ErrOutcomeUnknown)
	default:
		return "", nil, fmt.Errorf("MCP server %q: %w", t.srv.cfg.Name, t.srv.cfg.Secrets.RedactError(err))
	}
	if res.NeedsInput() {
		return "", nil, t.inputRequired(res)
	}
	text, images := resultContent(res, t.srv.m.opts.MaxResult, t.srv.readToolName())
	if res.IsError {
		return "", nil, errors.New(t.srv.redact(text))
	}
	return text, images, nil
}
