package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/tools"
)

var errNoDial = errors.New("test transport: not dialling")

// FuzzAllowHostsDialled checks allow_hosts against the address the
// transport actually dials, not against the URL as the tool reads it: for
// any URL and any allow list, a call either dials nothing or dials a
// host:port that an entry of the list names.
func FuzzAllowHostsDialled(f *testing.F) {
	seeds := []struct{ allow, url string }{
		{"api.example.com", "https://api.example.com/v1"},
		{"api.example.com", "https://API.example.com./v1"},
		{"api.example.com:8080", "http://api.example.com:8080/"},
		{"api.example.com:8080", "http://api.example.com/"},
		{"127.0.0.1", "http://127.0.0.1:9/x"},
		{"127.0.0.1", "http://127.0.0.1@evil.example/"},
		{"127.0.0.1", "http://evil.example#@127.0.0.1/"},
		{"127.0.0.1", "http://evil.example\\@127.0.0.1/"},
		{"127.0.0.1", "http://0x7f.0.0.1/"},
		{"127.0.0.1", "http://2130706433/"},
		{"::1", "http://[::1]:80/"},
		{"[::1]:8080", "http://[::1]:8080/"},
		{"[::1]:8080", "http://[::1%25eth0]:8080/"},
		{"localhost", "http://localhost%2eevil.example/"},
		{"example.com", "http://example.com:/"},
		{"example.com", "http://example.com:0080/"},
	}
	for _, s := range seeds {
		f.Add(s.allow, s.url)
	}
	f.Fuzz(func(t *testing.T, allow, rawURL string) {
		var mu sync.Mutex
		var dialled []string
		client := &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				mu.Lock()
				dialled = append(dialled, addr)
				mu.Unlock()
				return nil, errNoDial
			},
		}}
		entries := strings.Split(allow, ",")
		h := tools.NewHTTPRequest(tools.HTTPOptions{AllowHosts: entries, Client: client})
		raw, err := json.Marshal(map[string]string{"method": "GET", "url": rawURL})
		if err != nil {
			return
		}
		_, _ = h.Call(t.Context(), raw)
		for _, addr := range dialled {
			if !dialAllowed(addr, entries) {
				t.Errorf("allow_hosts %q, url %q: dialled %q", entries, rawURL, addr)
			}
		}
	})
}

// dialAllowed reports whether a dialled host:port is one that an
// allow_hosts entry names, by the rules of the policy file: the same host
// name or address (case and a trailing dot aside), on the entry's port if
// it has one.
func dialAllowed(addr string, entries []string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, e := range entries {
		eh, ep := e, ""
		if h, p, err := net.SplitHostPort(e); err == nil {
			eh, ep = h, p
		}
		eh = strings.TrimSuffix(strings.ToLower(strings.Trim(eh, "[]")), ".")
		if eh == host && (ep == "" || ep == port) {
			return true
		}
	}
	return false
}
