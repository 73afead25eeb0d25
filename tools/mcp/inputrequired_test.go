package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
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
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
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
	if len(states) != 2 || states[0] != "" || states[1] != "opaque-1" {
		t.Errorf("the server got request states %q; want none, then its own back", states)
	}
}
