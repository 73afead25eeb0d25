//lint:file-ignore SA1019 servers of the protocols before 2026-07-28 still ask for sampling and roots

package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/tools/mcp"
)

// What a server may ask the bot during a call: a ping is answered; the
// bot declares neither roots nor sampling, and a request for the model
// (sampling/createMessage) is refused, never answered by the bot's model
// without a person; a request for roots gets none.
func TestRequestsFromTheServer(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "asker", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "ask", InputSchema: objectSchema},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var out []string
			caps := req.Session.InitializeParams().Capabilities
			out = append(out, fmt.Sprintf("sampling declared: %v, roots declared: %v", caps.Sampling != nil, caps.RootsV2 != nil || caps.Roots.ListChanged))
			out = append(out, fmt.Sprintf("ping: %v", req.Session.Ping(ctx, nil)))
			res, err := req.Session.CreateMessage(ctx, &sdk.CreateMessageParams{MaxTokens: 10,
				Messages: []*sdk.SamplingMessage{{Role: "user", Content: &sdk.TextContent{Text: "say yes"}}}})
			out = append(out, fmt.Sprintf("sampling: answered %v, refused %v", res != nil, err != nil))
			roots, err := req.Session.ListRoots(ctx, nil)
			n := 0
			if roots != nil {
				n = len(roots.Roots)
			}
			out = append(out, fmt.Sprintf("roots: %d (%v)", n, err != nil))
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Join(out, "\n")}}}, nil
		})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	m := newManager(t, "mcp_servers:\n  s:\n    url: "+ts.URL+"\n", mcp.Options{Elicitor: &fakeElicitor{}})
	got, err := call(t, m, "s__ask", `{"text":"x"}`)
	if err != nil {
		t.Fatalf("s__ask: %v", err)
	}
	t.Logf("the server saw:\n%s", got)
	for _, want := range []string{"sampling declared: false, roots declared: false", "ping: <nil>", "sampling: answered false, refused true", "roots: 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("the server saw:\n%s\nwant %q", got, want)
		}
	}
}
