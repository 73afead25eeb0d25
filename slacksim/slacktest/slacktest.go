// Package slacktest is a fake of the Slack Web API for tests, and a signer
// for requests that look as if Slack sent them.
//
// A Server answers the methods the bot uses — auth.test,
// chat.postMessage, chat.update, chat.postEphemeral, views.open,
// views.update, views.push, views.publish (the Home tab; HomeView returns
// a person's latest), usergroups.users.list, conversations.members,
// conversations.info, conversations.history (top-level messages with
// their metadata), conversations.replies (a thread's messages, with
// theirs), conversations.open (a direct message: see
// DMChannel), chat.getPermalink, the streaming methods chat.startStream,
// chat.appendStream and chat.stopStream, and assistant.threads.setStatus — the way Slack does,
// takes form-encoded and JSON bodies alike, and records every call for
// the test to inspect. Point slack-go at it with
// slack.OptionAPIURL(srv.URL()), or a bot binary with SLACK_API_URL.
// Failures are injected per method: rate limits (HTTP 429 with
// Retry-After) and ok:false errors; RemoveBot and ArchiveChannel make a
// channel refuse the bot's messages as Slack does.
//
// The fake keeps only what tests look at: messages and their latest
// content, opened views, user-group members. It checks that a token was
// sent (and answers not_authed otherwise) but not which one, and it never
// keeps or logs the token.
//
// Its file host serves the files a test attaches to messages (AddFile
// gives the event's file object): at /files-pri/… and, for thumbnails,
// /files-tmb/…, on the API's origin, to requests with the token
// (RequireToken), as Slack's files.slack.com does; every request is
// recorded (FileFetches).
//
// The Server does not deliver events, run Socket Mode or accept
// response_url posts. What Slack sends to the bot, the test sends itself:
// SlashCommand, BlockActions (Click.Home for the Home tab),
// ViewSubmission, EventCallback and AppHomeOpened build the bodies, and a
// Signer signs them with the app's signing secret.
package slacktest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/slacksim/internal/wire"
)

// The identities the fake answers auth.test with, and the defaults of the
// request builders.
const (
	TeamID    = "T0TEST"
	TeamName  = "Countersign Test"
	BotUserID = "U0BOT"
	BotID     = "B0BOT"
)

// Another app in the workspace: what is posted with its token
// (OtherAppToken) is its own, as Slack marks a message with the bot that
// posted it. Tests use it to post, into a thread, a message the bot did
// not post.
const (
	OtherAppToken  = "xoxb-another-app"
	OtherAppUserID = "U0OTHERAPP"
	OtherAppBotID  = "B0OTHERAPP"
)

// maxRequest is the largest request body the fake reads.
const maxRequest = 10 << 20

// Call is one request the fake received.
type Call struct {
	// Method is the Web API method, e.g. "chat.postMessage".
	Method string
	// Params are the request's form values or, for a JSON body, its
	// top-level fields: strings as they are, other values as compact
	// JSON. The token is not among them.
	Params map[string]string
	// Blocks are the message's blocks, or the view's for views.*.
	Blocks json.RawMessage
	// Text, Channel, ThreadTS and User are the parameters of those names
	// (User is the recipient of an ephemeral message).
	Text, Channel, ThreadTS, User string
	// TS is the message's timestamp: the one assigned to a new message,
	// the one named by chat.update.
	TS string
	// Time is when the fake received the call.
	Time time.Time
	// Token reports whether the request carried a token, in the
	// Authorization header or the form. The token itself is not kept.
	Token bool
	// Error is the error code the fake answered with: "" when it answered
	// ok, "ratelimited" for an HTTP 429.
	Error string
	// OtherApp reports that the call was made with OtherAppToken: a
	// message it posted is that app's, not the bot's.
	OtherApp bool
}

// ButtonValue returns the value of the message's button whose action_id
// is actionID, and whether it has one.
func (c Call) ButtonValue(actionID string) (string, bool) {
	var blocks []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	if json.Unmarshal(c.Blocks, &blocks) != nil {
		return "", false
	}
	for _, b := range blocks {
		for _, e := range b.Elements {
			if e.ActionID == actionID {
				return e.Value, true
			}
		}
	}
	return "", false
}

// OK reports whether the fake answered the call with ok:true.
func (c Call) OK() bool { return c.Error == "" }

// Server is a fake Slack Web API on a local HTTP server. Its methods are
// safe for concurrent use.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	calls    []Call
	changed  chan struct{} // closed and replaced when a call arrives
	seq      int           // the last message timestamp handed out
	views    map[string]json.RawMessage
	messages map[string]Call // by channel and ts: the latest content
	deleted  map[string]bool // by channel and ts: messages removed (chat.delete)
	groups   map[string][]string
	members  map[string][]string // by channel
	homes    map[string]Call     // by user: the last views.publish
	limited  map[string]*rateLimit
	failing  map[string]*failure
	holds    map[string]*hold
	// answerHolds are the calls whose answers are kept (HoldAnswer).
	answerHolds []*answerHold
	// away are the channels the bot may not post in, with the error
	// code Slack answers there (RemoveBot, ArchiveChannel).
	away map[string]string

	streaming        map[string]bool         // by channel and ts: streams not stopped
	tasks            map[string][]TaskUpdate // by channel and ts: task updates received
	streamsWithoutTS int                     // chat.startStream calls to answer without a ts

	// The file host (files.go).
	files      map[string]storedFile // by file ID
	fileSeq    int
	fileToken  string
	filesError string
	fileHold   *hold // the next file request's (HoldNextFile)
	fetches    []FileFetch
}

// hold keeps a call to a method unanswered until released.
type hold struct {
	skip              int // calls to let through first
	arrived, released chan struct{}
}

// wait tells that the held request arrived and waits until it is
// released; false if its client gave up first (the request is then
// left unanswered).
func (h *hold) wait(r *http.Request) bool {
	close(h.arrived)
	select {
	case <-h.released:
		return true
	case <-r.Context().Done():
		return false
	}
}

// answerHold keeps the answer of the first call to method that match
// accepts, once the call is recorded, until released.
type answerHold struct {
	method             string
	match              func(Call) bool
	taken              bool
	recorded, released chan struct{}
}

type rateLimit struct {
	n     int
	after time.Duration
}

type failure struct {
	n    int
	code string
}

// NewServer starts a fake Slack Web API, closed when the test ends.
func NewServer(tb testing.TB) *Server {
	s := &Server{
		changed:  make(chan struct{}),
		views:    map[string]json.RawMessage{},
		messages: map[string]Call{},
		deleted:  map[string]bool{},
		groups:   map[string][]string{},
		members:  map[string][]string{},
		homes:    map[string]Call{},
		limited:  map[string]*rateLimit{},
		failing:  map[string]*failure{},
		holds:    map[string]*hold{},
		away:     map[string]string{},

		streaming: map[string]bool{},
		tasks:     map[string][]TaskUpdate{},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(s.srv.Close)
	return s
}

// URL is the base URL of the API, ending with "/": the value for
// slack.OptionAPIURL and SLACK_API_URL.
func (s *Server) URL() string { return s.srv.URL + "/api/" }

// Calls returns every call received so far, in order, including those
// the fake answered with an error.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// CallsTo returns the calls to one method, in order, including those the
// fake answered with an error.
func (s *Server) CallsTo(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.callsTo(method)
}

func (s *Server) callsTo(method string) []Call {
	var out []Call
	for _, c := range s.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// WaitFor waits until at least n calls to method arrived (counting those
// answered with an error) and returns all of them, or fails the test
// after timeout. Call it from the test's goroutine.
func (s *Server) WaitFor(t testing.TB, method string, n int, timeout time.Duration) []Call {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		calls, changed := s.callsTo(method), s.changed
		s.mu.Unlock()
		if len(calls) >= n {
			return calls
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("slacktest: %d calls to %s after %v, want %d; all calls: %s", len(calls), method, timeout, n, s.methods())
			return nil
		}
	}
}

// methods lists the methods called so far, for failure messages.
func (s *Server) methods() string {
	var names []string
	for _, c := range s.Calls() {
		names = append(names, c.Method)
	}
	return "[" + strings.Join(names, " ") + "]"
}

// Messages returns the messages posted with chat.postMessage in a thread
// (thread_ts equal to threadTS; "" for a channel's top-level messages),
// in order, as they were posted, and the messages streamed there with
// chat.startStream, with the text streamed so far. Calls answered with
// an error, and messages since deleted (chat.delete), are left out.
func (s *Server) Messages(channel, threadTS string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if isPosted(c) && c.Channel == channel && c.ThreadTS == threadTS && !s.deleted[c.Channel+"/"+c.TS] {
			c.Text = s.streamedText(c)
			out = append(out, c)
		}
	}
	return out
}

// Message returns a message's latest content: its chat.postMessage call
// with the text and blocks of the last chat.update applied.
func (s *Server) Message(channel, ts string) (Call, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.messages[channel+"/"+ts]
	return c, ok
}

// SetGroupMembers sets the users usergroups.users.list answers for a user
// group. Other groups are answered with no_such_subteam.
func (s *Server) SetGroupMembers(groupID string, users ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups[groupID] = slices.Clone(users)
}

// DMChannel is the ID of the bot's direct-message channel with user, as
// conversations.open answers it.
func DMChannel(user string) string { return "D" + user }

// Permalink is the link to a message that chat.getPermalink answers.
func Permalink(channel, ts string) string {
	return "https://countersign-test.slack.com/archives/" + channel + "/p" + strings.ReplaceAll(ts, ".", "")
}

// SetChannelMembers sets the users conversations.members answers for a
// channel. Other channels are answered with channel_not_found.
func (s *Server) SetChannelMembers(channel string, users ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members[channel] = slices.Clone(users)
}

// HomeView returns the Home tab last published for user (views.publish):
// the call, whose Blocks are the view's blocks.
func (s *Server) HomeView(user string) (Call, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.homes[user]
	return c, ok
}

// RateLimitNext answers the next n calls to method with HTTP 429 and a
// Retry-After of retryAfter, rounded up to whole seconds as Slack sends
// it.
func (s *Server) RateLimitNext(method string, n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limited[method] = &rateLimit{n: n, after: retryAfter}
}

// FailNext answers the next n calls to method with ok:false and the error
// code errCode, e.g. "channel_not_found".
func (s *Server) FailNext(method, errCode string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[method] = &failure{n: n, code: errCode}
}

// RemoveBot makes the fake answer as Slack does once the bot is removed
// from channel (someone typed /remove, or kicked it): what the bot posts,
// updates, streams or shows ephemerally there is refused with
// not_in_channel, and conversations.info says it is no member. The test
// sends the channel_left event itself. InviteBot undoes it.
func (s *Server) RemoveBot(channel string) { s.setAway(channel, "not_in_channel") }

// ArchiveChannel makes the fake answer as Slack does once channel is
// archived: what the bot posts, updates, streams or shows ephemerally
// there is refused with is_archived. InviteBot undoes it (as unarchiving
// and inviting the bot again would).
func (s *Server) ArchiveChannel(channel string) { s.setAway(channel, "is_archived") }

// InviteBot lets the bot post in channel again.
func (s *Server) InviteBot(channel string) { s.setAway(channel, "") }

func (s *Server) setAway(channel, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == "" {
		delete(s.away, channel)
		return
	}
	s.away[channel] = code
}

// postsIn reports whether method writes in its channel, which a bot
// removed from the channel (or an archived channel) is refused.
func postsIn(method string) bool {
	switch method {
	case "chat.postMessage", "chat.update", "chat.postEphemeral", "chat.startStream", "chat.appendStream", "chat.stopStream":
		return true
	}
	return false
}

// reply is what the fake answers: an HTTP status, headers and a JSON
// body.
type reply struct {
	status int
	header http.Header
	body   map[string]any
}

func okReply(fields map[string]any) reply {
	body := map[string]any{"ok": true}
	maps.Copy(body, fields)
	return reply{status: http.StatusOK, body: body}
}

func errReply(code string) reply {
	return reply{status: http.StatusOK, body: map[string]any{"ok": false, "error": code}}
}

// HoldNext lets skip calls to method through, then keeps the next one
// unanswered until release is called (or the caller gives up): arrived is
// closed when that call comes in. It is answered and recorded as usual
// once released.
func (s *Server) HoldNext(method string, skip int) (arrived <-chan struct{}, release func()) {
	h := &hold{skip: skip, arrived: make(chan struct{}), released: make(chan struct{})}
	s.mu.Lock()
	s.holds[method] = h
	s.mu.Unlock()
	var once sync.Once
	return h.arrived, func() { once.Do(func() { close(h.released) }) }
}

// HoldAnswer keeps the answer of the first call to method that match
// accepts from the caller until release is called (or the caller gives
// up); the call itself is recorded, and a message it posts is in the
// channel, at once: as Slack shows a posted message to the channel's
// members before its answer reaches the app that posted it. recorded is
// closed when that call has been recorded. match sees the call as
// recorded, and is called without the server's lock.
func (s *Server) HoldAnswer(method string, match func(Call) bool) (recorded <-chan struct{}, release func()) {
	h := &answerHold{method: method, match: match, recorded: make(chan struct{}), released: make(chan struct{})}
	s.mu.Lock()
	s.answerHolds = append(s.answerHolds, h)
	s.mu.Unlock()
	var once sync.Once
	return h.recorded, func() { once.Do(func() { close(h.released) }) }
}

// answerHeld returns the answer hold that takes call, if any.
func (s *Server) answerHeld(call Call) *answerHold {
	s.mu.Lock()
	var candidates []*answerHold
	for _, h := range s.answerHolds {
		if h.method == call.Method && !h.taken {
			candidates = append(candidates, h)
		}
	}
	s.mu.Unlock()
	for _, h := range candidates {
		if !h.match(call) {
			continue
		}
		s.mu.Lock()
		taken := h.taken
		h.taken = true
		s.answerHolds = slices.DeleteFunc(s.answerHolds, func(x *answerHold) bool { return x == h })
		s.mu.Unlock()
		if !taken {
			return h
		}
	}
	return nil
}

// ResponseURL is a response_url for a slash command or a click, as Slack
// sends them: a POST of a JSON message to it is recorded as a call with
// Method "response_url".
func (s *Server) ResponseURL() string { return s.srv.URL + "/response/" + uniqueTS() }

// response records a message posted to a response_url.
func (s *Server) response(w http.ResponseWriter, r *http.Request) {
	var msg struct {
		Text         string `json:"text"`
		ResponseType string `json:"response_type"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxRequest)).Decode(&msg); err != nil {
		http.Error(w, "invalid_payload", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.calls = append(s.calls, Call{Method: "response_url", Time: time.Now(), Text: msg.Text,
		Params: map[string]string{"response_type": msg.ResponseType, "url": r.URL.Path}})
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/response/") && r.Method == http.MethodPost {
		s.response(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/files-pri/") || strings.HasPrefix(r.URL.Path, "/files-tmb/") {
		s.serveFile(w, r)
		return
	}
	if r.URL.Path == "/signin" {
		signin(w)
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	h := s.holds[method]
	if h != nil && h.skip > 0 {
		h.skip, h = h.skip-1, nil
	} else {
		delete(s.holds, method)
	}
	s.mu.Unlock()
	if h != nil && !h.wait(r) {
		return
	}
	call := Call{Method: method, Time: time.Now()}
	rep := s.answer(r, &call)
	if ok, _ := rep.body["ok"].(bool); !ok {
		call.Error, _ = rep.body["error"].(string)
	}

	s.mu.Lock()
	s.calls = append(s.calls, call)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()

	if h := s.answerHeld(call); h != nil {
		close(h.recorded)
		select {
		case <-h.released:
		case <-r.Context().Done():
			return
		}
	}
	for k, v := range rep.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(rep.status)
	_ = json.NewEncoder(w).Encode(rep.body)
}

// answer parses a request into call and decides the reply.
func (s *Server) answer(r *http.Request, call *Call) reply {
	params, token, code := wire.ParseRequest(r, maxRequest)
	call.Params, call.Token, call.OtherApp = params, token != "", token == OtherAppToken
	call.Text, call.Channel, call.ThreadTS, call.User = params["text"], params["channel"], params["thread_ts"], params["user"]
	call.TS = params["ts"]
	call.Blocks = blocksOf(call.Method, params)
	if code != "" {
		return errReply(code)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if rl := s.limited[call.Method]; rl != nil && rl.n > 0 {
		rl.n--
		secs := int(math.Ceil(rl.after.Seconds()))
		return reply{
			status: http.StatusTooManyRequests,
			header: http.Header{"Retry-After": {strconv.Itoa(secs)}},
			body:   map[string]any{"ok": false, "error": "ratelimited"},
		}
	}
	if f := s.failing[call.Method]; f != nil && f.n > 0 {
		f.n--
		return errReply(f.code)
	}
	if token == "" {
		return errReply("not_authed")
	}
	if code := s.away[call.Channel]; code != "" && postsIn(call.Method) {
		return errReply(code)
	}
	switch call.Method {
	case "auth.test":
		return okReply(map[string]any{
			"url": "https://countersign-test.slack.com/", "team": TeamName, "user": "countersign",
			"team_id": TeamID, "user_id": BotUserID, "bot_id": BotID,
		})
	case "chat.postMessage":
		return s.postMessage(call)
	case "chat.update":
		return s.update(call)
	case "chat.delete":
		key := call.Channel + "/" + call.TS
		msg, ok := s.messages[key]
		if !ok {
			return errReply("message_not_found")
		}
		if msg.OtherApp != call.OtherApp {
			return errReply("cant_delete_message") // another app's message
		}
		delete(s.messages, key)
		s.deleted[key] = true
		return okReply(map[string]any{"channel": call.Channel, "ts": call.TS})
	case "chat.postEphemeral":
		switch {
		case call.Channel == "":
			return errReply("channel_not_found")
		case call.User == "":
			return errReply("user_not_in_channel")
		}
		call.TS = s.nextTS()
		return okReply(map[string]any{"message_ts": call.TS})
	case "views.open", "views.push":
		if params["trigger_id"] == "" {
			return errReply("invalid_trigger_id")
		}
		return s.putView(call, "")
	case "views.update":
		id := params["view_id"]
		if _, ok := s.views[id]; !ok && params["external_id"] == "" {
			return errReply("not_found")
		}
		return s.putView(call, id)
	case "views.publish":
		call.User = params["user_id"]
		var view struct {
			Type string `json:"type"`
		}
		if call.User == "" || json.Unmarshal([]byte(params["view"]), &view) != nil || view.Type != "home" {
			return errReply("invalid_arguments")
		}
		rep := s.putView(call, "")
		s.homes[call.User] = *call
		return rep
	case "conversations.members":
		users, ok := s.members[call.Channel]
		if !ok {
			return errReply("channel_not_found")
		}
		return okReply(map[string]any{"members": slices.Clone(users), "response_metadata": map[string]any{"next_cursor": ""}})
	case "usergroups.users.list":
		users, ok := s.groups[params["usergroup"]]
		if !ok {
			return errReply("no_such_subteam")
		}
		return okReply(map[string]any{"users": slices.Clone(users)})
	case "conversations.open":
		users := strings.Split(params["users"], ",")
		if len(users) != 1 || len(users[0]) < 2 || !strings.ContainsAny(users[0][:1], "UW") {
			return errReply("user_not_found")
		}
		return okReply(map[string]any{"channel": map[string]any{"id": DMChannel(users[0]), "is_im": true, "user": users[0]}})
	case "chat.getPermalink":
		ts := params["message_ts"]
		if _, ok := s.messages[call.Channel+"/"+ts]; !ok {
			return errReply("message_not_found")
		}
		return okReply(map[string]any{"channel": call.Channel, "permalink": Permalink(call.Channel, ts)})
	case "conversations.info":
		if call.Channel == "" {
			return errReply("channel_not_found")
		}
		return okReply(map[string]any{"channel": map[string]any{
			"id": call.Channel, "name": strings.ToLower(call.Channel), "is_channel": true,
			"is_member": s.away[call.Channel] == "", "is_archived": s.away[call.Channel] == "is_archived",
		}})
	case "conversations.history":
		return s.history(call, params)
	case "conversations.replies":
		return s.replies(call, params)
	}
	if rep, ok := s.answerStream(call); ok {
		return rep
	}
	return errReply("unknown_method")
}

// postMessage posts a new message; s.mu is held.
func (s *Server) postMessage(call *Call) reply {
	switch {
	case call.Channel == "":
		return errReply("channel_not_found")
	case call.Text == "" && len(call.Blocks) == 0 && call.Params["attachments"] == "":
		return errReply("no_text")
	}
	call.TS = s.nextTS()
	s.messages[call.Channel+"/"+call.TS] = *call
	return okReply(map[string]any{"channel": call.Channel, "ts": call.TS, "message": messageJSON(*call)})
}

// history answers conversations.history: the channel's top-level
// messages, newest first, up to limit (default 100), with their metadata
// when include_all_metadata is set; s.mu is held.
func (s *Server) history(call *Call, params map[string]string) reply {
	if call.Channel == "" {
		return errReply("channel_not_found")
	}
	limit, err := strconv.Atoi(params["limit"])
	if err != nil || limit <= 0 {
		limit = 100
	}
	withMetadata := params["include_all_metadata"] == "1" || params["include_all_metadata"] == "true"
	var out []map[string]any
	for i := len(s.calls) - 1; i >= 0 && len(out) < limit; i-- {
		c := s.calls[i]
		if c.Method != "chat.postMessage" || !c.OK() || c.Channel != call.Channel || c.ThreadTS != "" {
			continue
		}
		m := messageJSON(s.messages[c.Channel+"/"+c.TS])
		if raw := c.Params["metadata"]; withMetadata && raw != "" {
			m["metadata"] = json.RawMessage(raw)
		}
		out = append(out, m)
	}
	return okReply(map[string]any{"messages": out, "has_more": false})
}

// replies answers conversations.replies: the thread's parent, then its
// replies, oldest first, later than oldest if it is given, limit (default
// 100) to a page, with a cursor to the next; with their metadata when
// include_all_metadata is set; s.mu is held.
func (s *Server) replies(call *Call, params map[string]string) reply {
	root := params["ts"]
	if call.Channel == "" {
		return errReply("channel_not_found")
	}
	if _, ok := s.messages[call.Channel+"/"+root]; !ok || root == "" {
		return errReply("thread_not_found")
	}
	limit, err := strconv.Atoi(params["limit"])
	if err != nil || limit <= 0 {
		limit = 100
	}
	from, _ := strconv.Atoi(params["cursor"])
	withMetadata := params["include_all_metadata"] == "1" || params["include_all_metadata"] == "true"
	oldest := params["oldest"]
	var thread []map[string]any
	for _, c := range s.calls {
		if c.Method != "chat.postMessage" || !c.OK() || c.Channel != call.Channel || s.deleted[c.Channel+"/"+c.TS] {
			continue
		}
		if c.TS != root && c.ThreadTS != root {
			continue
		}
		if c.TS != root && oldest != "" && !tsAfter(c.TS, oldest) {
			continue
		}
		m := messageJSON(s.messages[c.Channel+"/"+c.TS])
		if raw := c.Params["metadata"]; withMetadata && raw != "" {
			m["metadata"] = json.RawMessage(raw)
		}
		thread = append(thread, m)
	}
	from = min(max(from, 0), len(thread))
	page, next := thread[from:], ""
	if len(page) > limit {
		page, next = page[:limit], strconv.Itoa(from+limit)
	}
	return okReply(map[string]any{"messages": page, "has_more": next != "", "response_metadata": map[string]any{"next_cursor": next}})
}

// tsAfter reports whether message timestamp a is later than b, both
// "seconds.micros" as Slack writes them.
func tsAfter(a, b string) bool {
	x, _ := strconv.ParseFloat(a, 64)
	y, _ := strconv.ParseFloat(b, 64)
	return x > y
}

// update replaces a message's text and blocks; s.mu is held.
func (s *Server) update(call *Call) reply {
	key := call.Channel + "/" + call.TS
	msg, ok := s.messages[key]
	switch {
	case call.Channel == "":
		return errReply("channel_not_found")
	case !ok:
		return errReply("message_not_found")
	case msg.OtherApp != call.OtherApp:
		return errReply("cant_update_message") // another app's message
	case s.streaming[key]:
		return errReply("cant_update_message")
	case call.Text == "" && len(call.Blocks) == 0 && call.Params["attachments"] == "":
		return errReply("no_text")
	}
	msg.Text, msg.Blocks = call.Text, call.Blocks
	s.messages[key] = msg
	return okReply(map[string]any{"channel": call.Channel, "ts": call.TS, "text": call.Text, "message": messageJSON(msg)})
}

// putView stores a view under id, or a new id if id is empty; s.mu is
// held.
func (s *Server) putView(call *Call, id string) reply {
	var view map[string]any
	if err := json.Unmarshal([]byte(call.Params["view"]), &view); err != nil || view == nil {
		return errReply("invalid_arguments")
	}
	if id == "" {
		id = fmt.Sprintf("V%08d", len(s.views)+1)
	}
	view["id"], view["team_id"], view["app_id"], view["bot_id"] = id, TeamID, "A0TEST", BotID
	view["hash"] = fmt.Sprintf("%d.%s", len(s.calls)+1, id)
	view["state"] = map[string]any{"values": map[string]any{}}
	raw, _ := json.Marshal(view)
	s.views[id] = raw
	return okReply(map[string]any{"view": view})
}

// nextTS hands out message timestamps, unique and increasing like
// Slack's: "1700000000.000100", "1700000000.000200"…; s.mu is held.
func (s *Server) nextTS() string {
	s.seq++
	micros := int64(s.seq) * 100
	return fmt.Sprintf("%d.%06d", 1_700_000_000+micros/1_000_000, micros%1_000_000)
}

// messageJSON is a message as Slack echoes it.
func messageJSON(c Call) map[string]any {
	user, bot := BotUserID, BotID
	if c.OtherApp {
		user, bot = OtherAppUserID, OtherAppBotID
	}
	m := map[string]any{
		"type": "message", "text": c.Text, "user": user, "bot_id": bot, "team": TeamID, "ts": c.TS,
	}
	if c.ThreadTS != "" {
		m["thread_ts"] = c.ThreadTS
	}
	if len(c.Blocks) > 0 {
		m["blocks"] = c.Blocks
	}
	return m
}

// blocksOf finds the blocks of a message or a view.
func blocksOf(method string, params map[string]string) json.RawMessage {
	raw := params["blocks"]
	if strings.HasPrefix(method, "views.") {
		var view struct{ Blocks json.RawMessage }
		if json.Unmarshal([]byte(params["view"]), &view) == nil {
			raw = string(view.Blocks)
		}
	}
	if raw == "" || raw == "null" || !json.Valid([]byte(raw)) {
		return nil
	}
	return json.RawMessage(compact([]byte(raw)))
}

// compact is JSON without insignificant space; invalid JSON is returned as
// it is.
func compact(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
