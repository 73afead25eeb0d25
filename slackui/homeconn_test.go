package slackui_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/slackui/slackuitest"
)

// mine are a person's connections: one made, one not.
func mine() []mcpauth.Personal {
	return []mcpauth.Personal{
		{Server: "tickets", Connection: &mcpauth.Connection{Identity: mcpauth.Identity{Server: "tickets", User: cardAsker},
			Connected: cardNow.Add(-48 * time.Hour), Scopes: []string{"read", "write"}, Refreshable: true}},
		{Server: "wiki"},
	}
}

// The Home view lists the servers that run calls with the viewer's own
// account: a Revoke button (with a confirmation) for a connection, since
// when and with which scopes; a Connect button where there is none. The
// buttons carry the server's name, nothing else.
func TestHomeViewConnections(t *testing.T) {
	t.Parallel()
	view := slackui.HomeView(slackui.HomeContent{Connections: mine(), TeamURL: homeTeamURL}, cardNow)
	checkHomeView(t, view)
	compareGolden(t, "home-connections", view)
	text := slackuitest.Texts(t, view.Blocks.BlockSet)
	for _, want := range []string{"Your connections", "*tickets*", "Connected since", "scopes `read write`", "renews itself", "*wiki*", "Not connected"} {
		if !strings.Contains(text, want) {
			t.Errorf("the Home view does not show %q:\n%s", want, text)
		}
	}
	got := fmt.Sprint(sectionButtons(view.Blocks.BlockSet))
	if want := "[mcp_revoke Revoke danger tickets mcp_home_connect Connect primary wiki]"; got != want {
		t.Errorf("buttons = %s, want %s", got, want)
	}
	if none := slackuitest.Texts(t, slackui.HomeView(slackui.HomeContent{}, cardNow).Blocks.BlockSet); strings.Contains(none, "Your connections") {
		t.Errorf("a Home view without such servers lists connections:\n%s", none)
	}
}

// The modal Connect opens, before and after the authorization URL is
// known.
func TestConnectModalGolden(t *testing.T) {
	t.Parallel()
	compareGolden(t, "modal-connect-asking", slackui.ConnectModal("tickets", "", time.Time{}))
	m := slackui.ConnectModal("tickets", "https://auth.example.com/authorize?state=s&client_id=c", cardNow.Add(10*time.Minute))
	checkModal(t, m)
	compareGolden(t, "modal-connect", m)
}

// FuzzHomeConnections: whatever the servers' names and the scopes an
// authorization server granted, the Home view keeps to Slack's limits
// with no markup from them, and the buttons carry the names as they are.
func FuzzHomeConnections(f *testing.F) {
	f.Add("tickets", "read <!here>", 3)
	f.Add("t*i`c<@U1>", "```\n&amp;\xff", 12)
	f.Fuzz(func(t *testing.T, server, scope string, n int) {
		n = 1 + min(max(n, 0), 20)
		var list []mcpauth.Personal
		for i := range n {
			p := mcpauth.Personal{Server: fmt.Sprint(server, i)}
			if i%2 == 0 {
				p.Connection = &mcpauth.Connection{Connected: cardNow, Scopes: []string{scope, scope}, Expiry: cardNow.Add(time.Hour)}
			}
			list = append(list, p)
		}
		view := slackui.HomeView(slackui.HomeContent{Connections: list}, cardNow)
		checkHomeView(t, view)
		for i, b := range sectionButtons(view.Blocks.BlockSet) {
			if want := fmt.Sprint(server, i); !strings.HasSuffix(b, " "+want) {
				t.Errorf("button %d = %q, want the value %q", i, b, want)
			}
		}
		checkModal(t, slackui.ConnectModal(server, "https://a.example/?s="+scope, cardNow))
	})
}

// sectionButtons are the buttons beside sections, as "action_id text
// style value".
func sectionButtons(blocks []slack.Block) []string {
	var out []string
	for _, b := range blocks {
		s, ok := b.(*slack.SectionBlock)
		if !ok || s.Accessory == nil || s.Accessory.ButtonElement == nil {
			continue
		}
		btn := s.Accessory.ButtonElement
		out = append(out, strings.Join([]string{btn.ActionID, btn.Text.Text, string(btn.Style), btn.Value}, " "))
	}
	return out
}
