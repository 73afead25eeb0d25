package mcp

import (
	"slices"
	"testing"

	"github.com/countersign/countersign/tools"
)

func TestServerEnv(t *testing.T) {
	environ := []string{"PATH=/bin", "HOME=/root", "LANG=C.UTF-8", "LC_TIME=en_GB", "TMPDIR=/var/bot", "TERM=xterm",
		"SLACK_SIGNING_SECRET=s", "SLACK_BOT_TOKEN=xoxb", "OPENAI_API_KEY=k", "REDIS_URL=redis://:p@h/0", "BOT_ADDR=:3000",
		"HTTPS_PROXY=http://proxy:3128", "AWS_SECRET_ACCESS_KEY=a"}
	cfg := tools.MCPServer{InheritEnv: []string{"HTTPS_PROXY", "SLACK_BOT_TOKEN"}, Env: map[string]string{"API_TOKEN": "t", "LANG": "fr_FR"}}
	tests := []struct {
		name string
		as   *account
		want []string
	}{
		{"the bot's own user", nil, []string{"PATH=/bin", "HOME=/root", "LANG=fr_FR", "LC_TIME=en_GB", "TMPDIR=/var/bot", "TERM=xterm",
			"HTTPS_PROXY=http://proxy:3128", "API_TOKEN=t"}},
		{"another user", &account{name: "nobody", uid: 65534, gid: 65534, home: "/tmp/countersign-mcp/nobody"},
			[]string{"PATH=/bin", "HOME=/tmp/countersign-mcp/nobody", "LANG=fr_FR", "LC_TIME=en_GB", "TERM=xterm",
				"HTTPS_PROXY=http://proxy:3128", "USER=nobody", "LOGNAME=nobody", "API_TOKEN=t"}},
	}
	for _, tt := range tests {
		// SLACK_BOT_TOKEN in inherit_env is refused by the policy; were
		// it to get here, it is left out all the same.
		if got := serverEnv(cfg, environ, tt.as); !slices.Equal(got, tt.want) {
			t.Errorf("%s: serverEnv = %q\nwant %q", tt.name, got, tt.want)
		}
	}
}
