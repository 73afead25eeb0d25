// Package settingurl says what is wrong with an http(s) URL given in a
// setting (an environment variable), in words for the person who set
// it, without repeating the value: a key or a password pasted into the
// wrong variable must not end up in a log.
package settingurl

import (
	"net/url"
	"strings"
)

// Problem parses raw as an absolute http or https URL. It returns the
// URL, or why it is none ("it has no scheme: …"), for the caller to
// put after the setting's name and before what a good one looks like.
func Problem(raw string) (*url.URL, string) {
	u, err := url.Parse(raw)
	switch {
	case !strings.Contains(raw, "://"):
		return nil, "it has no scheme: write http:// or https:// before the host"
	case err != nil:
		return nil, "it is not a URL (a space, or a character a URL cannot hold?)"
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, "its scheme must be http or https"
	case u.Host == "":
		return nil, "it has no host after the scheme"
	}
	return u, ""
}
