// Package wire is what the two stand-ins for Slack's side — the
// playground's simulator and the test fake — share: reading Web API
// requests the way Slack does, signing what they send the bot, and
// escaping text as Slack does. It does not answer requests; each stand-in
// does that itself.
package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// ParseRequest reads a Web API call's arguments from the query and a form
// or JSON body (at most limit bytes), and its token from the
// Authorization header or the form's token field. code is the error Slack
// answers a malformed request with, "" if it is well formed. JSON values
// that are not strings (blocks, a view) are kept as compact JSON text.
func ParseRequest(r *http.Request, limit int64) (params map[string]string, token, code string) {
	params = map[string]string{}
	for k, v := range r.URL.Query() {
		params[k] = v[0]
	}
	token, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	body, err := io.ReadAll(io.LimitReader(r.Body, limit))
	if err != nil {
		return params, token, "request_body_unreadable"
	}
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case len(body) == 0:
	case mediaType == "application/json":
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil {
			return params, token, "invalid_json"
		}
		for k, raw := range fields {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				params[k] = s
				continue
			}
			var b bytes.Buffer
			if json.Compact(&b, raw) != nil {
				b.Reset()
				b.Write(raw)
			}
			params[k] = b.String()
		}
	default:
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return params, token, "invalid_form_data"
		}
		for k, v := range form {
			params[k] = v[0]
		}
	}
	if t := params["token"]; t != "" && token == "" {
		token = t
	}
	delete(params, "token")
	return params, token, ""
}
