package mcp_test

import (
	"fmt"
	"testing"

	"github.com/countersign/countersign/tools/mcp"
)

// Servers are told the bot's version, not a placeholder.
func TestClientReportsTheBotsVersion(t *testing.T) {
	mcp.SetClientVersion("v9.8.7")
	p := newInProcess(t)
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  srv:\n    url: %s\n", p.url), mcp.Options{})
	m.Tools() // connects
	var got []string
	for ss := range p.srv.Sessions() {
		if ip := ss.InitializeParams(); ip != nil && ip.ClientInfo != nil {
			got = append(got, ip.ClientInfo.Name+" "+ip.ClientInfo.Version)
		}
	}
	if len(got) == 0 || got[0] != "countersign v9.8.7" {
		t.Errorf("the server was told %v; want countersign v9.8.7", got)
	}
}
