package slacksim_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/countersign/countersign/slacksim"
)

func TestIsLoopbackHost(t *testing.T) {
	tests := []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.1:3000", true},
		{"localhost:3000", true},
		{"LOCALHOST", true},
		{"localhost.:3000", true},
		{"[::1]:3000", true},
		{"[::1]", true},
		{"attacker.example", false},
		{"attacker.example:3000", false},
		{"127.0.0.1.attacker.example", false},
		{"localhost.attacker.example:3000", false},
		{"10.0.0.1:3000", false},
		{"0.0.0.0:3000", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := slacksim.IsLoopbackHost(tt.host); got != tt.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}

// The page, which holds the token that lets its holder act as anyone,
// opens only from the URL the playground printed: another process on the
// machine that asks for it, with no token or a wrong one, gets a page
// that says which URL to open, and nothing it can act with.
func TestPageOpensOnlyFromItsURL(t *testing.T) {
	sim := slacksim.New(slacksim.Options{BotURL: "http://127.0.0.1:1", SigningSecret: "s", BotToken: "xoxb-t"})
	defer sim.Close()
	srv := httptest.NewServer(sim.PageHandler())
	defer srv.Close()
	pageURL := sim.PageURL(srv.URL)
	access := strings.TrimPrefix(pageURL, srv.URL+"/?token=")
	if len(access) < 32 || access == sim.PageToken() {
		t.Fatalf("PageURL = %q; want base/?token= and a secret of its own", pageURL)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(client *http.Client, url string, cookies ...*http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	refused := func(name string, resp *http.Response, body string) {
		t.Helper()
		if resp.StatusCode != http.StatusForbidden || strings.Contains(body, sim.PageToken()) || strings.Contains(body, access) ||
			!strings.Contains(body, "the URL the bot printed") || len(resp.Cookies()) != 0 {
			t.Errorf("%s: GET / = %d, cookies %v, %q; want 403 saying to open the printed URL, and no token", name, resp.StatusCode, resp.Cookies(), body)
		}
	}

	resp, body := get(noRedirect, srv.URL+"/")
	refused("no token", resp, body)
	resp, body = get(noRedirect, srv.URL+"/?token=0123")
	refused("a wrong token", resp, body)
	resp, body = get(noRedirect, srv.URL+"/?token="+access[:len(access)-1])
	refused("the token cut short", resp, body)
	resp, body = get(noRedirect, srv.URL+"/", &http.Cookie{Name: "countersign_playground_" + srv.URL[strings.LastIndex(srv.URL, ":")+1:], Value: "0123"})
	refused("a forged cookie", resp, body)
	for _, path := range []string{"/ui/state", "/events"} {
		if resp, body := get(noRedirect, srv.URL+path); resp.StatusCode != http.StatusForbidden || strings.Contains(body, `"messages"`) {
			t.Errorf("GET %s without the page token = %d %s, want 403", path, resp.StatusCode, body)
		}
	}

	// The printed URL: a cookie for the page, and a redirect that leaves
	// the token out of the address.
	resp, _ = get(noRedirect, pageURL)
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(cookies) != 1 {
		t.Fatalf("GET the printed URL = %d, Location %q, cookies %v; want 303 to / with a cookie", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
	if c := cookies[0]; !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Errorf("cookie %+v; want HttpOnly, SameSite=Strict, Path=/", c)
	}
	if resp, page := get(noRedirect, srv.URL+"/", cookies...); resp.StatusCode != http.StatusOK || !strings.Contains(page, sim.PageToken()) {
		t.Errorf("GET / with the cookie = %d; want the page with its token", resp.StatusCode)
	}

	// A browser that follows the redirect ends on / with the page.
	jar, _ := cookiejar.New(nil)
	resp, page := get(&http.Client{Jar: jar}, pageURL)
	if resp.StatusCode != http.StatusOK || resp.Request.URL.String() != srv.URL+"/" || !strings.Contains(page, `name="playground-token" content="`+sim.PageToken()+`"`) {
		t.Errorf("opening the printed URL ended at %s with %d; want %s/ and the page with its token", resp.Request.URL, resp.StatusCode, srv.URL)
	}
}
