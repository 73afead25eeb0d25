package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// A server that answers a call with an "input required" result (the
// newest protocol's input requests): the person behind the call is asked,
// and the call is sent again with the answer and the server's opaque
// state, which the server gets back as it gave it.
func TestInputRequiredResult(t *testing.T) {
	hs, states := mrtrServer(t)
	el := &fakeElicitor{answer: tools.ElicitAnswer{Action: tools.ElicitAccept, Content: map[string]any{"name": "Ada"}}}
	m := newManager(t, "mcp_servers:\n  s:\n    url: "+hs.URL+"\n", mcp.Options{Elicitor: el})
	m.Tools()
	tool, _, ok := m.Lookup("s__book")
	if !ok {
		t.Fatal("s__book is not offered")
	}
	info := tools.CallInfo{Thread: "T1:C1:1.0", Call: "0.0", Attempt: 1, Requester: "U1", Channel: "C1"}
	got, err := tool.(tools.InfoTool).CallWithInfo(context.Background(), info, json.RawMessage(`{"text":"x"}`))
	if err != nil || got != "booked for Ada" {
		t.Fatalf("call = %q, %v; want it booked with the answer", got, err)
	}
	if len(el.got) != 1 || el.got[0].Call != info || el.got[0].Message != "Booked for whom?" {
		t.Errorf("elicitations = %+v; want one, for the call", el.got)
	}
	if len(*states) != 2 || (*states)[0] != "" || (*states)[1] != "opaque-1" {
		t.Errorf("the server got request states %q; want none, then its own back", *states)
	}
}

// A run that can pause gets the server's questions and state back from
// the call at once (nobody is asked during the call); the call sent
// again with the answers and the state is answered.
func TestInputRequiredResultPauses(t *testing.T) {
	hs, states := mrtrServer(t)
	el := &fakeElicitor{block: true}
	m := newManager(t, "mcp_servers:\n  s:\n    url: "+hs.URL+"\n", mcp.Options{Elicitor: el})
	m.Tools()
	tool, _, ok := m.Lookup("s__book")
	if !ok {
		t.Fatal("s__book is not offered")
	}
	info := tools.CallInfo{Thread: "T1:C1:1.0", Call: "0.0", Attempt: 1, Requester: "U1", Channel: "C1", CanPause: true}
	_, err := tool.(tools.InfoTool).CallWithInfo(context.Background(), info, json.RawMessage(`{"text":"x"}`))
	var asked *tools.InputRequiredError
	if !errors.As(err, &asked) {
		t.Fatalf("call = %v; want the server's input requests", err)
	}
	if asked.State != "opaque-1" || len(asked.Requests) != 1 || asked.Requests[0].Key != "who" || asked.Requests[0].Message != "Booked for whom?" {
		t.Fatalf("input required = %+v", asked)
	}
	if !strings.Contains(string(asked.Requests[0].Schema), `"name"`) {
		t.Errorf("schema = %s", asked.Requests[0].Schema)
	}
	if len(el.got) != 0 {
		t.Errorf("someone was asked during the call: %+v", el.got)
	}
	info.Attempt = 2
	info.Input = &tools.InputReply{State: asked.State, Answers: map[string]tools.ElicitAnswer{"who": {Action: tools.ElicitAccept, Content: map[string]any{"name": "Ada"}}}}
	got, err := tool.(tools.InfoTool).CallWithInfo(context.Background(), info, json.RawMessage(`{"text":"x"}`))
	if err != nil || got != "booked for Ada" {
		t.Fatalf("call again = %q, %v; want it booked with the answer", got, err)
	}
	if len(*states) != 2 || (*states)[0] != "" || (*states)[1] != "opaque-1" {
		t.Errorf("the server got request states %q; want none, then its own back", *states)
	}
}

// mrtrServer is a server whose book tool asks who it books for with an
// "input required" result; states are the request states it got.
func mrtrServer(t *testing.T) (*httptest.Server, *[]string) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "mrtr", Version: "1"}, nil)
	var states []string
	srv.AddTool(&sdk.Tool{Name: "book", Description: "Books a room.", InputSchema: objectSchema},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			states = append(states, req.Params.RequestState)
			ans, ok := req.Params.InputResponses["who"].(*sdk.ElicitResult)
			if !ok {
				return &sdk.CallToolResult{RequestState: "opaque-1", InputRequests: sdk.InputRequestMap{"who": &sdk.ElicitParams{
					Message: "Booked for whom?", RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)}}}, nil
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("booked for %v", ans.Content["name"])}}}, nil
		})
	// Stateless: a server of the newest protocol (a stateful one falls
	// back to asking during the call).
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hs.Close)
	return hs, &states
}
