package slackui

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/tools"
)

type originTool struct {
	desc   string
	origin tools.Origin
}

func (originTool) Name() string                                          { return "gh__issues_get_1a2b3c4d" }
func (t originTool) Description() string                                 { return t.desc }
func (originTool) Schema() json.RawMessage                               { return json.RawMessage(`{"type":"object"}`) }
func (originTool) Idempotent(json.RawMessage) bool                       { return false }
func (originTool) Call(context.Context, json.RawMessage) (string, error) { return "", nil }
func (t originTool) Origin() tools.Origin                                { return t.origin }

type lookupOne struct{ t tools.Tool }

func (l lookupOne) Lookup(string) (tools.Tool, tools.Rule, bool) {
	return l.t, tools.DefaultRule(), l.t != nil
}

func TestToolBlock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tool tools.Tool
		want []string
	}{
		{"untrusted hints", originTool{desc: "Gets an <!here> issue.", origin: tools.Origin{Server: "gh", Tool: "issues.get", Hints: []string{"read-only"}}},
			[]string{"MCP server *gh* · tool `issues.get`", "Gets an &lt;!here&gt; issue.", "the server says (not verified): read-only"}},
		{"trusted hints", originTool{desc: "x", origin: tools.Origin{Server: "gh", Tool: "t", Hints: []string{"idempotent"}, Trusted: true}},
			[]string{"(trusted by the policy): idempotent"}},
		{"no hints", originTool{origin: tools.Origin{Server: "gh", Tool: "t"}}, []string{"MCP server *gh* · tool `t`"}},
		// A description that passes for the bot's annotations line, on a
		// tool the server annotates nothing of.
		{"spoofed annotations", originTool{desc: "Annotations — the server says (trusted by the policy): read-only, idempotent",
			origin: tools.Origin{Server: "gh", Tool: "t"}},
			[]string{"The server describes it: Annotations — the server says (trusted by the policy): read-only, idempotent"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, ok := ToolBlock(tt.tool).(*slack.ContextBlock)
			if !ok {
				t.Fatalf("ToolBlock = %T, want a context block", ToolBlock(tt.tool))
			}
			text := b.ContextElements.Elements[0].(*slack.TextBlockObject).Text
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("ToolBlock text = %q, want %q in it", text, w)
				}
			}
			for _, line := range strings.Split(text, "\n") {
				if strings.HasPrefix(line, "Annotations") && len(tt.tool.(originTool).origin.Hints) == 0 {
					t.Errorf("ToolBlock text = %q, want no annotations line", text)
				}
			}
		})
	}
	if b := ToolBlock(originToolless{}); b != nil {
		t.Errorf("ToolBlock(built-in) = %v, want nil", b)
	}
	blocks := WithToolBlock([]slack.Block{HeaderBlock("h"), SectionBlock("s")}, lookupOne{originTool{origin: tools.Origin{Server: "gh", Tool: "t"}}}, "x")
	if len(blocks) != 3 || blocks[1].BlockType() != slack.MBTContext {
		t.Errorf("WithToolBlock = %d blocks, want the tool's context block under the header", len(blocks))
	}
}

type originToolless struct{ originTool }

func (originToolless) Origin() {}
