// Package slackfiles reads the files people attach to their Slack
// messages, for the model: it decodes a message event's files (File),
// downloads the images among them with the bot token, and says in a line
// of plain text what each file is and, when it was not read, why
// (Fetcher.Read). It sends the bot token to Slack's file host only —
// https://files.slack.com, or the origin of SLACK_API_URL when that
// points elsewhere (a proxy, a test's fake Slack) — never follows a
// redirect off that origin, and reads at most a bit more than an image
// may weigh.
//
// It does not decide which messages are requests (package handlers), nor
// keep the images: the conversation's checkpoint does (package agent).
package slackfiles

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

// File is a file attached to a message, as a message event's "files"
// list gives it: the fields the bot reads, under Slack's names. It is
// also how the Slack front end stores a request's files until the
// request is carried on, so its JSON names are stable.
type File struct {
	ID       string `json:"id,omitempty"`
	Name     string `json:"name,omitempty"`
	Mimetype string `json:"mimetype,omitempty"`
	Size     int64  `json:"size,omitempty"`
	// Mode is "hosted", "external", "snippet", "tombstone" (deleted),
	// "hidden_by_limit"…: only a file Slack hosts has bytes to fetch.
	Mode       string `json:"mode,omitempty"`
	URLPrivate string `json:"url_private,omitempty"`
	// The thumbnails Slack made of an image, at most 1024, 720 and 480
	// pixels a side: preferred to the file itself, which a retina
	// screenshot makes too large to show.
	Thumb1024 string `json:"thumb_1024,omitempty"`
	Thumb720  string `json:"thumb_720,omitempty"`
	Thumb480  string `json:"thumb_480,omitempty"`
}

// DefaultFileHost is where Slack serves the files of its workspaces.
const DefaultFileHost = "https://files.slack.com"

// MaxFiles is how many files of one message are read; the rest are named
// only. (Slack takes at most 10 on a message.)
const MaxFiles = 10

// MaxMessageImageBytes bounds the images of one message together, as
// tools.MaxResultImageBytes bounds a tool result's.
const MaxMessageImageBytes = tools.MaxResultImageBytes

// DefaultTimeout bounds the download of one file.
const DefaultTimeout = 15 * time.Second

// maxRead is the most of a response that is read: a byte over the image
// bound, enough to tell that a file is too large without reading it all.
const maxRead = tools.MaxImageBytes + 1

// Options are a Fetcher's optional settings.
type Options struct {
	// APIURL is the Web API's URL (SLACK_API_URL), "" for Slack's own:
	// the token goes to its origin only when it is not Slack's.
	APIURL string
	// Timeout bounds the download of one file (default DefaultTimeout).
	Timeout time.Duration
	// Transport sends the requests (default http.DefaultTransport).
	Transport http.RoundTripper
	// Logger defaults to a logger that discards.
	Logger logrus.FieldLogger
}

// Fetcher downloads the images attached to messages. It is safe for
// concurrent use.
type Fetcher struct {
	token   string
	origin  *url.URL
	client  *http.Client
	timeout time.Duration
	log     logrus.FieldLogger
	// refused is set once Slack refused a file (no files:read scope, a
	// token it does not take): the warning that says what to do is
	// logged once.
	refused atomic.Bool
}

// New returns a Fetcher that sends token to the file host of opts.APIURL
// only.
func New(token string, opts Options) (*Fetcher, error) {
	origin, err := FileOrigin(opts.APIURL)
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.Out = io.Discard
		opts.Logger = l
	}
	f := &Fetcher{token: token, origin: origin, timeout: opts.Timeout, log: opts.Logger}
	f.client = &http.Client{
		Transport: opts.Transport,
		Timeout:   opts.Timeout,
		// Go copies the Authorization header to a redirect's target on
		// the same host name or a subdomain of it, whatever its port or
		// scheme: a redirect is followed only within the file host's
		// origin, so the token goes nowhere else.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if !f.Allowed(req.URL.String()) {
				return errRedirected
			}
			if len(via) >= 3 {
				return errRedirected
			}
			return nil
		},
	}
	return f, nil
}

// FileOrigin is the origin the bot token may be sent to for files, by
// the Web API's URL: Slack's file host for Slack's own API (apiURL empty,
// or on slack.com; GovSlack's for an API on slack-gov.com), else the
// origin of apiURL.
func FileOrigin(apiURL string) (*url.URL, error) {
	if strings.TrimSpace(apiURL) == "" {
		return url.Parse(DefaultFileHost)
	}
	u, err := url.Parse(strings.TrimSpace(apiURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("slack files: SLACK_API_URL must be an absolute http or https URL")
	}
	for _, domain := range []string{"slack.com", "slack-gov.com"} {
		if h := strings.ToLower(u.Hostname()); h == domain || strings.HasSuffix(h, "."+domain) {
			// Slack's API and its files are on hosts of their own
			// (slack.com, files.slack.com; GovSlack's slack-gov.com,
			// files.slack-gov.com).
			return url.Parse("https://files." + domain)
		}
	}
	return &url.URL{Scheme: strings.ToLower(u.Scheme), Host: strings.ToLower(u.Host)}, nil
}

// Allowed reports whether raw is a URL the bot token may be sent to: an
// absolute URL on the file host's origin (same scheme, host and port),
// without credentials of its own.
func (f *Fetcher) Allowed(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.Opaque != "" {
		return false
	}
	return strings.EqualFold(u.Scheme, f.origin.Scheme) && strings.EqualFold(u.Host, f.origin.Host)
}

// Errors of a download; what a line says of them.
var (
	errNotSlack   = errors.New("its address is not Slack's file host")
	errRedirected = errors.New("the file host sent the request elsewhere (the bot may lack the files:read scope)")
	errWebPage    = errors.New("the file host answered with a web page, not the file (the bot may lack the files:read scope)")
	errTooLarge   = fmt.Errorf("over the %s the model is shown", tools.Size(tools.MaxImageBytes))
)

// slackError is an error code Slack answered with instead of a file.
type slackError struct{ code string }

func (e *slackError) Error() string { return e.code }

// httpError is an HTTP status Slack answered with instead of a file.
type httpError struct{ status int }

func (e *httpError) Error() string { return "HTTP " + strconv.Itoa(e.status) }

// Read returns a line for each of files, to add to the message's text,
// and the images among them that the model may be shown, downloaded
// once here. A nil Fetcher downloads nothing (the model is shown no
// images: LLM_IMAGES=off), and each file is named only. The lines are
// plain text; file names, which people choose, are quoted.
func (f *Fetcher) Read(ctx context.Context, files []File) (lines []string, images []llm.Image) {
	total := 0
	for i, file := range files {
		kind := "file"
		if isImageType(file.Mimetype) {
			kind = "image"
		}
		head := kind + " " + quoteName(file)
		size := ""
		if file.Size > 0 {
			size = ", " + tools.Size(int(min(file.Size, 1<<40)))
		}
		switch {
		case kind == "file":
			lines = append(lines, fmt.Sprintf("[%s, %s%s: not read]", head, cleanType(file.Mimetype), size))
		case f == nil:
			lines = append(lines, fmt.Sprintf("[%s%s: not read: the model is shown no images]", head, size))
		case i >= MaxFiles:
			lines = append(lines, fmt.Sprintf("[%s%s: not read: the first %d files of a message are]", head, size, MaxFiles))
		default:
			img, why := f.image(ctx, file)
			switch {
			case why != "":
				lines = append(lines, fmt.Sprintf("[%s%s: %s]", head, size, why))
			case total+len(img.Data) > MaxMessageImageBytes:
				lines = append(lines, fmt.Sprintf("[%s, %s: not shown: the message's images are over the %s the model is shown]",
					head, tools.Size(len(img.Data)), tools.Size(MaxMessageImageBytes)))
			default:
				total += len(img.Data)
				images = append(images, img)
				lines = append(lines, fmt.Sprintf("[%s, %s, %s]", head, img.MIME, tools.Size(len(img.Data))))
			}
		}
	}
	return lines, images
}

// image downloads file, an image, and checks it: the image, or why it is
// not shown.
func (f *Fetcher) image(ctx context.Context, file File) (llm.Image, string) {
	src := cmp.Or(file.Thumb1024, file.Thumb720, file.Thumb480, file.URLPrivate)
	if src == "" {
		return llm.Image{}, "not read: Slack gave no address for it"
	}
	if file.URLPrivate == src && file.Size > tools.MaxImageBytes {
		return llm.Image{}, "not read: " + errTooLarge.Error()
	}
	log := f.log.WithField("file", file.ID)
	if !f.Allowed(src) {
		log.WithField("host", hostOf(src)).Warn("a file attached to a message is not on Slack's file host; not read")
		return llm.Image{}, "not read: " + errNotSlack.Error()
	}
	data, err := f.fetch(ctx, src)
	switch {
	case errors.Is(err, errTooLarge):
		return llm.Image{}, err.Error()
	case err != nil:
		var se *slackError
		var he *httpError
		refused := errors.Is(err, errRedirected) || errors.Is(err, errWebPage) ||
			(errors.As(err, &he) && (he.status == http.StatusUnauthorized || he.status == http.StatusForbidden)) ||
			(errors.As(err, &se) && (se.code == "missing_scope" || se.code == "not_authed" || se.code == "invalid_auth"))
		if refused && f.refused.CompareAndSwap(false, true) {
			log.WithError(err).Warn("Slack refused the bot a file attached to a message: give the app the files:read bot scope and reinstall it; " +
				"until then attached images are not shown to the model (logged once)")
		} else {
			log.WithError(err).Info("a file attached to a message could not be read from Slack")
		}
		return llm.Image{}, "could not be read from Slack: " + err.Error()
	}
	// What the bytes are, not what the message said they are.
	mimeType := tools.SniffImage(data)
	if mimeType == "" {
		mimeType = strings.ToLower(file.Mimetype)
	}
	if why := tools.CheckImage(mimeType, data); why != "" {
		return llm.Image{}, why
	}
	return llm.Image{MIME: mimeType, Data: data}, ""
}

// fetch downloads src, a URL on the file host, with the bot token.
// Errors never hold the URL (its query may be a credential) nor the
// token.
func (f *Fetcher) fetch(ctx context.Context, src string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, errNotSlack
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	resp, err := f.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL
		}
		switch {
		case errors.Is(err, errRedirected):
			return nil, errRedirected
		case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
			return nil, errors.New("it did not answer in time")
		}
		return nil, errors.New("it could not be reached")
	}
	defer resp.Body.Close()
	ctype, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case ctype == "application/json":
		var body struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		if json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&body) == nil && !body.OK && body.Error != "" {
			return nil, &slackError{code: cleanCode(body.Error)}
		}
	case ctype == "text/html":
		return nil, errWebPage
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &httpError{status: resp.StatusCode}
	}
	if resp.ContentLength > tools.MaxImageBytes {
		return nil, errTooLarge
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxRead))
	if err != nil {
		return nil, errors.New("the download was cut off")
	}
	if len(data) > tools.MaxImageBytes {
		return nil, errTooLarge
	}
	return data, nil
}

func isImageType(mimeType string) bool {
	for _, t := range tools.ImageTypes {
		if strings.EqualFold(mimeType, t) {
			return true
		}
	}
	return false
}

// maxNameRunes is how much of a file's name a line quotes.
const maxNameRunes = 80

// quoteName is file's name as a line quotes it: in double quotes, with
// Go's escapes for quotes, backslashes, line breaks and other control
// characters, so that a name cannot end the line or pass for text of its
// own; cut at maxNameRunes. A file without a name is named by its ID.
func quoteName(file File) string {
	name := file.Name
	if name == "" {
		name = file.ID
	}
	if utf8.RuneCountInString(name) > maxNameRunes {
		name = string([]rune(name)[:maxNameRunes]) + "…"
	}
	return strconv.Quote(strings.ToValidUTF8(name, "\uFFFD"))
}

// cleanType is a file's declared type, for a line: a media type of
// letters, digits and "+-./", or "unknown type".
func cleanType(t string) string {
	if t == "" || len(t) > 100 {
		return "unknown type"
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("+-./", r)) {
			return "unknown type"
		}
	}
	return t
}

// cleanCode is an error code from Slack, for a line: letters, digits and
// underscores, or "an error".
func cleanCode(code string) string {
	if len(code) > 60 {
		return "an error"
	}
	for _, r := range code {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return "an error"
		}
	}
	return code
}

// hostOf is raw's host, for a log line: never its path or query.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a URL)"
	}
	return u.Host
}

// MaxDecoded is how many files Decode keeps of a message's list: Slack
// puts at most 10 on a message, and the rest of a longer list is not
// Slack's.
const MaxDecoded = 20

// Decode reads a message event's "files" list. It is lenient: an entry
// that is not an object (null, a number) or not a file object is left
// out, and a list that is not a list is
// no files, so that an odd event is still taken as the message it is.
func Decode(raw json.RawMessage) []File {
	var entries []json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &entries) != nil {
		return nil
	}
	var out []File
	for _, e := range entries {
		var f File
		if t := bytes.TrimSpace(e); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &f) != nil {
			continue
		}
		out = append(out, f)
		if len(out) == MaxDecoded {
			break
		}
	}
	return out
}
