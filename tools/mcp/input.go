package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/tools"
)

// Input requests (the newest protocol's "input required" result): a
// server answers a call with questions and an opaque state instead of a
// result, and expects the call again with the answers and the state. The
// SDK's automatic retry is off (it would hold the call open in this
// process while a person answers). When the run can pause
// (tools.CallInfo.CanPause), the call returns a *tools.InputRequiredError
// at once: the agent saves the questions and the state with the call,
// the run pauses like an approval, and the answer, from any replica, any
// time before the call's input expires, sends the call again with
// CallInfo.Input. Otherwise (a front end that cannot pause) the
// Elicitor asks during the call, and the call is sent again here.

// maxInputRounds caps the rounds of questions of one call answered
// during the call (the SDK's own cap).
const maxInputRounds = 10

// send sends the call; a server that needs input is answered here, during
// the call, only when the run cannot pause for it.
func (t *tool) send(ctx context.Context, sess *session, info tools.CallInfo, params *sdk.CallToolParams) (*sdk.CallToolResult, error) {
	for round := 1; ; round++ {
		res, err := sess.cs.CallTool(ctx, params)
		if err != nil || !res.NeedsInput() || info.CanPause || round >= maxInputRounds {
			return res, err
		}
		asked, err := t.requests(res)
		if err != nil {
			return res, nil // inputRequired says why
		}
		el := t.srv.m.elicitor()
		answers := make(map[string]tools.ElicitAnswer, len(asked))
		for _, q := range asked {
			ans := tools.ElicitAnswer{Action: tools.ElicitCancel}
			if el != nil && info.Thread != "" {
				got, err := el.Elicit(ctx, tools.Elicitation{Call: info, Tool: t.name, Message: q.Message, Schema: q.Schema})
				if err == nil {
					ans = got
				} else {
					t.srv.log.WithError(err).WithFields(logrus.Fields{"thread": info.Thread, "call": info.Call}).Info("input request got no answer; cancelled")
				}
			}
			answers[q.Key] = ans
		}
		next := *params
		next.InputResponses, next.RequestState = inputResponses(answers), res.RequestState
		params = &next
	}
}

// requests are the questions of an input-required result, in the order
// of their keys. Only forms can be asked: a request for a URL, for the
// model's help (sampling) or for roots is refused.
func (t *tool) requests(res *sdk.CallToolResult) ([]tools.InputRequest, error) {
	keys := make([]string, 0, len(res.InputRequests))
	for k := range res.InputRequests {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]tools.InputRequest, 0, len(keys))
	for _, k := range keys {
		p, ok := res.InputRequests[k].(*sdk.ElicitParams)
		if !ok || p.Mode == "url" {
			return nil, fmt.Errorf("MCP server %q asked for input the bot cannot ask people for (%s)", t.srv.cfg.Name, kindOfInput(res.InputRequests[k]))
		}
		schema, err := t.srv.wire.forms.raw(p.RequestedSchema)
		if err != nil || p.RequestedSchema == nil {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, tools.InputRequest{Key: k, Message: p.Message, Schema: schema})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("MCP server %q is busy and asked for the call again later", t.srv.cfg.Name)
	}
	return out, nil
}

// inputRequired is the outcome of a call its server answered with
// questions: a *tools.InputRequiredError, or an error for the model
// when they cannot be asked.
func (t *tool) inputRequired(res *sdk.CallToolResult) error {
	asked, err := t.requests(res)
	if err != nil {
		return err
	}
	return &tools.InputRequiredError{Requests: asked, State: res.RequestState}
}

// kindOfInput names an input request the bot does not ask people: a
// URL to open, or a request of another kind (sampling, roots) by its
// type.
func kindOfInput(r sdk.InputRequest) string {
	if p, ok := r.(*sdk.ElicitParams); ok {
		return "a " + p.Mode
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", r), "*mcp.")
}

// inputResponses are answers as the protocol sends them back.
func inputResponses(answers map[string]tools.ElicitAnswer) sdk.InputResponseMap {
	out := make(sdk.InputResponseMap, len(answers))
	for k, a := range answers {
		out[k] = &sdk.ElicitResult{Action: string(a.Action), Content: a.Content}
	}
	return out
}
