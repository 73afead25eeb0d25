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

// pager serves n tools, two a page; with repeat, every page names the
// same next cursor and the server takes it for the first page again, as
// a server with a bug in its paging does.
func pager(t *testing.T, n int, repeat bool) string {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "pager", Version: "1"}, &sdk.ServerOptions{PageSize: 2})
	for i := range n {
		srv.AddTool(&sdk.Tool{Name: fmt.Sprintf("t%d", i), InputSchema: objectSchema},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return nil, nil })
	}
	if repeat {
		srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
			return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
				if p, ok := req.GetParams().(*sdk.ListToolsParams); ok {
					p.Cursor = ""
				}
				res, err := next(ctx, method, req)
				if lt, ok := res.(*sdk.ListToolsResult); ok && err == nil {
					lt.NextCursor = "again"
				}
				return res, err
			}
		})
	}
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestToolListPages(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		repeat bool
		want   string
	}{
		{"five pages", 9, false, "s__t0 s__t1 s__t2 s__t3 s__t4 s__t5 s__t6 s__t7 s__t8"},
		// Listed until the cursor comes back, then offered: not listed
		// until the connection's time is up, and then down, at every try.
		{"a cursor given back", 2, true, "s__t0 s__t1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, "mcp_servers:\n  s:\n    url: "+pager(t, tt.n, tt.repeat)+"\n", mcp.Options{})
			if got := strings.Join(toolNames(m.Tools()), " "); got != tt.want {
				t.Errorf("Tools() = %s, want %s", got, tt.want)
			}
			if st := m.Status()[0]; st.State != mcp.Up || len(st.LeftOut) > 0 {
				t.Errorf("status = %+v, want up, nothing left out", st)
			}
		})
	}
}
