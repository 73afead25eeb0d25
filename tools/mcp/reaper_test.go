package mcp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/tools/mcp"
)

// A server whose program is not there is down with the system's word for
// it, as when the bot started it itself (on Linux, a reaper starts it,
// and tells the bot why it could not: reaper_linux.go).
func TestServerProgramThatIsNotThere(t *testing.T) {
	m := newManager(t, "mcp_servers:\n  broken:\n    command: [/nonexistent/mcp-server, --stdio]\n", mcp.Options{MinBackoff: time.Hour})
	m.Tools()
	want := "mcp broken: down: fork/exec /nonexistent/mcp-server: no such file or directory"
	if d := m.Describe(); !strings.Contains(d, want) {
		t.Errorf("Describe() = %q, want %q", d, want)
	}
}
