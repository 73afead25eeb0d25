package mcp_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/countersign/countersign/tools/mcp"
)

func TestToolName(t *testing.T) {
	long := strings.Repeat("x", 80)
	tests := []struct {
		server, tool, want string
	}{
		{"everything", "echo", "everything__echo"},
		{"gh", "get-issue_2", "gh__get-issue_2"},
		{"gh", "issues.get", "gh__issues_get_e07e7a8c"},
		{"gh", long, "gh__" + strings.Repeat("x", 51) + "_b1e8e9b8"},
	}
	for _, tt := range tests {
		got := mcp.ToolName(tt.server, tt.tool)
		if len(tt.want) > 0 && got[:len(got)-8] != tt.want[:len(tt.want)-8] {
			t.Errorf("ToolName(%q, %q) = %q, want %q", tt.server, tt.tool, got, tt.want)
		}
		if len(got) > 64 {
			t.Errorf("ToolName(%q, %q) is %d long", tt.server, tt.tool, len(got))
		}
	}
	if mcp.ToolName("s", long+"a") == mcp.ToolName("s", long+"b") {
		t.Errorf("two long names that differ at the end give the same name")
	}
}

var providerName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func FuzzToolName(f *testing.F) {
	f.Add("everything", "echo")
	f.Add("gh", "issues.get/ü")
	f.Add("s", strings.Repeat("y", 100))
	f.Fuzz(func(t *testing.T, server, tool string) {
		if !regexp.MustCompile(`^[a-z0-9_-]{1,32}$`).MatchString(server) {
			return
		}
		got := mcp.ToolName(server, tool)
		if !providerName.MatchString(got) {
			t.Errorf("ToolName(%q, %q) = %q, not a provider's function name", server, tool, got)
		}
		if !strings.HasPrefix(got, server+"__") {
			t.Errorf("ToolName(%q, %q) = %q, lost the server's prefix", server, tool, got)
		}
		if got != mcp.ToolName(server, tool) {
			t.Errorf("ToolName is not stable")
		}
	})
}
