package slackfiles_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/slackfiles"
)

// Any files list decodes without a panic, to at most MaxDecoded files,
// and each file's line (without a Fetcher: nothing is fetched) is one
// line in brackets, whatever its name and type.
func FuzzDecode(f *testing.F) {
	f.Add(`[{"id":"F1","name":"shot.png","mimetype":"image/png","size":120,"url_private":"https://files.slack.com/x"}]`)
	f.Add(`[{"id":"F1","name":"a\n]\"[","mimetype":"application/pdf\u2028"},1,"x",null]`)
	f.Add(`{"not":"a list"}`)
	f.Add(`[{"size":"12"}]`)
	f.Fuzz(func(t *testing.T, raw string) {
		files := slackfiles.Decode(json.RawMessage(raw))
		if len(files) > slackfiles.MaxDecoded {
			t.Fatalf("Decode kept %d files", len(files))
		}
		var none *slackfiles.Fetcher
		lines, images := none.Read(context.Background(), files)
		if len(lines) != len(files) || len(images) != 0 {
			t.Fatalf("Read = %d lines, %d images for %d files", len(lines), len(images), len(files))
		}
		for _, l := range lines {
			if strings.ContainsAny(l, "\n\r\u2028\u2029") || !strings.HasPrefix(l, "[") || !strings.HasSuffix(l, "]") {
				t.Fatalf("line %q is not one bracketed line", l)
			}
		}
	})
}

// A URL the token may go to is on the file host's origin, however it is
// written.
func FuzzAllowed(f *testing.F) {
	for _, s := range []string{"https://files.slack.com/x", "https://files.slack.com@evil.example/", "https://evil.example\\@files.slack.com/",
		"HTTPS://FILES.SLACK.COM/x", "https://files.slack.com%2f@evil/", "https://files.slack.com:443/x"} {
		f.Add(s)
	}
	fetcher, err := slackfiles.New("xoxb-fuzz", slackfiles.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !fetcher.Allowed(raw) {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || !strings.EqualFold(u.Hostname(), "files.slack.com") || u.Port() != "" || !strings.EqualFold(u.Scheme, "https") || u.User != nil {
			t.Fatalf("Allowed(%q) = true: host %q, scheme %q", raw, u.Host, u.Scheme)
		}
	})
}
