package bot

import (
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/countersign/countersign/tools"
)

// A BOT_PUBLIC_URL that cannot be the base of the OAuth callback is
// refused at start-up, in words that say how to write one and without
// quoting the value; one that can is taken.
func TestBadPublicURLIsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"countersign.example.com", "it has no scheme"},
		{"ftp://countersign.example.com", "its scheme must be http or https"},
		{"https://", "it has no host"},
		{"https://admin:hunter2@countersign.example.com", "user name or password"},
		{"https://countersign.example.com/?team=hunter2", "query"},
		{"https://countersign.example.com/#hunter2", "fragment"},
		{"https://counter sign.example.com", "not a URL"},
	} {
		err := checkPublicURL(func(k string) string { return map[string]string{"BOT_PUBLIC_URL": c.url}[k] })
		if err == nil || !strings.HasPrefix(err.Error(), "BOT_PUBLIC_URL: ") || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), "e.g. https://countersign.example.com") {
			t.Errorf("BOT_PUBLIC_URL=%s: %v; want it refused saying %q and how to write one", c.url, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("BOT_PUBLIC_URL=%s: the error quotes the value: %v", c.url, err)
		}
	}
	for _, ok := range []string{"", "https://countersign.example.com", "https://example.com/countersign/", "http://10.0.0.7:3000"} {
		if err := checkPublicURL(func(k string) string { return map[string]string{"BOT_PUBLIC_URL": ok}[k] }); err != nil {
			t.Errorf("BOT_PUBLIC_URL=%q: %v; want it taken", ok, err)
		}
	}
}

// A bot serving Slack with a server whose users connect their own
// accounts, and no BOT_PUBLIC_URL, says where their browsers will be
// sent back; with BOT_PUBLIC_URL set, or with servers people do not
// connect to, it says nothing.
func TestCallbackFromAddrIsWarnedAbout(t *testing.T) {
	t.Parallel()
	requester := &tools.Policy{MCPServers: map[string]tools.MCPServer{
		"static": {Name: "static"}, "tickets": {Name: "tickets", Auth: tools.AuthRequester}, "wiki": {Name: "wiki", Auth: tools.AuthRequester}}}
	service := &tools.Policy{MCPServers: map[string]tools.MCPServer{"tickets": {Name: "tickets", Auth: tools.AuthService}}}
	for _, c := range []struct {
		name   string
		env    map[string]string
		policy *tools.Policy
		warned bool
	}{
		{"requester, no public URL", map[string]string{"BOT_ADDR": ":3000"}, requester, true}, // one warning, naming the first,
		{"requester, public URL", map[string]string{"BOT_PUBLIC_URL": "https://countersign.example.com"}, requester, false},
		{"service identity only", nil, service, false},
		{"no policy", nil, nil, false},
	} {
		log, hook := test.NewNullLogger()
		WarnCallbackFromAddr(func(k string) string { return c.env[k] }, c.policy, log)
		var warnings []*logrus.Entry
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel {
				warnings = append(warnings, e)
			}
		}
		if !c.warned {
			if len(warnings) != 0 {
				t.Errorf("%s: warned %q; want nothing", c.name, warnings[0].Message)
			}
			continue
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0].Message, "BOT_PUBLIC_URL is not set") ||
			warnings[0].Data["server"] != "tickets" || warnings[0].Data["callback"] != "http://127.0.0.1:3000/oauth/callback" {
			t.Errorf("%s: warnings %v; want one naming tickets and the callback http://127.0.0.1:3000/oauth/callback", c.name, warnings)
		}
	}
}

// Whatever BOT_PUBLIC_URL holds, the error in reading it quotes none of
// it: a URL with a password in it must not reach a log.
func FuzzPublicURLError(f *testing.F) {
	for _, s := range []string{"https://admin:hunter2@bot.example", "bot.example:443", "https://bot.example/?t=secret", "https://bot ex.com", "ftp://x/y", "https://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := checkPublicURL(func(k string) string { return map[string]string{"BOT_PUBLIC_URL": raw}[k] })
		if err == nil {
			return
		}
		if !strings.HasPrefix(err.Error(), "BOT_PUBLIC_URL: ") {
			t.Errorf("BOT_PUBLIC_URL=%q: %v; want the variable named first", raw, err)
		}
		// A value that is a piece of the error's own words is not found
		// through the value.
		if len(raw) >= 6 && !strings.Contains(publicURLWords, raw) && strings.Contains(err.Error(), raw) {
			t.Errorf("BOT_PUBLIC_URL=%q: the error quotes it: %v", raw, err)
		}
	})
}

// publicURLWords is every text checkPublicURL's errors are made of.
const publicURLWords = "BOT_PUBLIC_URL: it has no scheme: write http:// or https:// before the host; want the bot's base URL as browsers reach it, e.g. https://countersign.example.com " +
	"it is not a URL (a space, or a character a URL cannot hold?) its scheme must be http or https it has no host after the scheme " +
	"it holds a user name or password, which browsers are not to be sent it has a query (?…) or fragment (#…): /oauth/callback is appended to it"
