package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signature is the X-Slack-Signature Slack sends with a body at a time,
// for an app's signing secret: "v0=" and the hex HMAC-SHA256 of
// "v0:<unix time>:<body>".
func Signature(secret []byte, at time.Time, body []byte) string {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("v0:" + strconv.FormatInt(at.Unix(), 10) + ":"))
	h.Write(body)
	return "v0=" + hex.EncodeToString(h.Sum(nil))
}

// Sign sets the X-Slack-Request-Timestamp and X-Slack-Signature headers of
// req for body, as sent at a time.
func Sign(req *http.Request, secret []byte, body []byte, at time.Time) {
	req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(at.Unix(), 10))
	req.Header.Set("X-Slack-Signature", Signature(secret, at, body))
}

// escaper escapes the characters Slack gives a meaning to.
var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Escape writes &, < and > as Slack does in the text it sends apps.
func Escape(s string) string { return escaper.Replace(s) }
