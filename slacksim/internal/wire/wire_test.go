package wire_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/countersign/countersign/slacksim/internal/wire"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name, contentType, auth, body string
		want                          map[string]string
		wantToken, wantCode           string
	}{
		{"form with bearer", "application/x-www-form-urlencoded", "Bearer xoxb-1", "channel=C1&text=hi%26more",
			map[string]string{"channel": "C1", "text": "hi&more"}, "xoxb-1", ""},
		{"form with token field", "application/x-www-form-urlencoded", "", "token=xoxb-2&channel=C1",
			map[string]string{"channel": "C1"}, "xoxb-2", ""},
		{"json", "application/json; charset=utf-8", "Bearer xoxb-3", `{"channel":"C1","blocks":[ {"type": "divider"} ]}`,
			map[string]string{"channel": "C1", "blocks": `[{"type":"divider"}]`}, "xoxb-3", ""},
		{"broken json", "application/json", "", `{"channel":`, map[string]string{}, "", "invalid_json"},
		{"broken form", "application/x-www-form-urlencoded", "", "%zz", map[string]string{}, "", "invalid_form_data"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "/api/chat.postMessage", strings.NewReader(tt.body))
		r.Header.Set("Content-Type", tt.contentType)
		if tt.auth != "" {
			r.Header.Set("Authorization", tt.auth)
		}
		params, token, code := wire.ParseRequest(r, 1<<20)
		if code != tt.wantCode || token != tt.wantToken || len(params) != len(tt.want) {
			t.Errorf("ParseRequest(%s) = %v, %q, %q; want %v, %q, %q", tt.name, params, token, code, tt.want, tt.wantToken, tt.wantCode)
			continue
		}
		for k, v := range tt.want {
			if params[k] != v {
				t.Errorf("ParseRequest(%s)[%s] = %q, want %q", tt.name, k, params[k], v)
			}
		}
	}
}
