package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

type progressSeen struct {
	mu  sync.Mutex
	got []string
}

func (p *progressSeen) CallProgress(_ context.Context, call tools.CallInfo, progress, total float64, message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, fmt.Sprintf("%s %v/%v %s", call.Call, progress, total, message))
}

// A call that reports progress outlives its server's timeout, and its
// progress is reported for its call; one that goes quiet does not.
func TestProgressExtendsTheTimeout(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "slow", Version: "1"}, nil)
	work := func(report bool) sdk.ToolHandler {
		return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			for i := 1; i <= 6; i++ {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(250 * time.Millisecond):
				}
				if report {
					_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(),
						Progress: float64(i), Total: 6, Message: "step"})
				}
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "finished"}}}, nil
		}
	}
	srv.AddTool(&sdk.Tool{Name: "talks", InputSchema: objectSchema}, work(true))
	srv.AddTool(&sdk.Tool{Name: "quiet", InputSchema: objectSchema}, work(false))
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	seen := &progressSeen{}
	m := newManager(t, "mcp_servers:\n  s:\n    url: "+hs.URL+"\n    timeout: 1s\n", mcp.Options{})
	m.SetProgressReporter(seen)
	m.Tools()
	info := tools.CallInfo{Thread: "T1:C1:1.0", Call: "0.0", Attempt: 1, Requester: "U1", Channel: "C1"}
	call := func(name string) (string, error) {
		tool, _, _ := m.Lookup(name)
		return tool.(tools.InfoTool).CallWithInfo(context.Background(), info, json.RawMessage(`{"text":"x"}`))
	}
	if got, err := call("s__talks"); err != nil || got != "finished" {
		t.Errorf("a call that reports progress for 1.5s with a 1s timeout = %q, %v; want it finished", got, err)
	}
	seen.mu.Lock()
	// The last notification may come after the result.
	if len(seen.got) < 4 || seen.got[0] != "0.0 1/6 step" {
		t.Errorf("progress reported = %q; want 0.0 1/6 step and the next ones", seen.got)
	}
	seen.mu.Unlock()
	if _, err := call("s__quiet"); err == nil || !strings.Contains(err.Error(), "did not answer within 1s") {
		t.Errorf("a quiet call of 1.5s with a 1s timeout ended with %v; want the timeout", err)
	}
}
