package slacksim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// User is a person in the playground's workspace.
type User struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// The identities the simulator uses unless told otherwise. They are shaped
// like Slack's (capital letters and digits), which the bot relies on to
// recognise mentions.
const (
	DefaultTeamID      = "T0PLAYGROUND"
	DefaultChannelID   = "C0PLAYGROUND"
	DefaultChannelName = "playground"
	DefaultBotUserID   = "U0COUNTERSIGN"
	DefaultBotID       = "B0COUNTERSIGN"
	DefaultBotName     = "Countersign"
	DefaultCommand     = "/agent"

	// SlackbotID is the author of Slack's own messages, such as a failed
	// slash command's.
	SlackbotID = "USLACKBOT"
)

// DefaultUsers are "You" and a teammate, to try approving someone else's
// request and the self-approval rules.
var DefaultUsers = []User{{ID: "U0YOU", Name: "You"}, {ID: "U0TEAMMATE", Name: "Teammate"}}

// Options configure a Simulator. BotURL and SigningSecret are required;
// the rest have defaults.
type Options struct {
	// BotURL is the base URL of the bot's HTTP endpoints, without the
	// path: requests go to BotURL+"/slack/commands" and so on.
	BotURL string
	// SigningSecret is the app's signing secret, shared with the bot.
	SigningSecret string
	// BotToken, if set, is the only token the Web API accepts.
	BotToken string
	// Client sends the requests to the bot (default: a client that gives
	// up after 3 seconds, as Slack does).
	Client *http.Client

	// TeamID, ChannelID, ChannelName, BotUserID, BotID, BotName and
	// Command name the workspace, its one channel, the bot and its slash
	// command.
	TeamID, ChannelID, ChannelName string
	BotUserID, BotID, BotName      string
	Command                        string
	// Users are the people one can act as in the page (default
	// DefaultUsers); the first is selected when the page opens.
	Users []User

	// Model and Hint are shown in the page's header: the model's name and
	// a line on what to try.
	Model, Hint string

	// Now is the clock (default time.Now); NewID returns random hex for
	// trigger, event and view IDs (default crypto/rand).
	Now   func() time.Time
	NewID func() string
	// Logger defaults to a logger that discards.
	Logger logrus.FieldLogger
}

// Message is a message in the channel, as the page shows it.
type Message struct {
	TS string `json:"ts"`
	// ThreadTS is the root's ts for a reply in a thread, else "".
	ThreadTS string `json:"thread_ts,omitempty"`
	// User is the author: a person, the bot's user, or SlackbotID.
	User  string `json:"user"`
	BotID string `json:"bot_id,omitempty"`
	// Text is mrkdwn; Blocks, when present, are what Slack shows instead.
	Text   string          `json:"text"`
	Blocks json.RawMessage `json:"blocks,omitempty"`
	// VisibleTo is the one person who sees an ephemeral message; "" for
	// a message everyone sees.
	VisibleTo string `json:"visible_to,omitempty"`
	// Updated counts the chat.update calls on the message (and the
	// chat.appendStream and chat.stopStream calls on a streamed one).
	Updated int `json:"updated,omitempty"`
	// Streaming: the message was started with chat.startStream and its
	// stream has not been stopped.
	Streaming bool `json:"streaming,omitempty"`

	// metadata is the message metadata the bot posted it with (JSON),
	// which conversations.replies answers with include_all_metadata.
	metadata string
	// markdown and tasks are what a streamed message received: its text
	// and its tasks' latest updates, shown in Text.
	markdown string
	tasks    []streamTask
}

// View is an open modal.
type View struct {
	ID   string `json:"id"`
	User string `json:"user"`
	Hash string `json:"hash"`
	// View is the view as Slack answers views.open: what the bot sent,
	// with id, hash and the other fields Slack adds.
	View json.RawMessage `json:"view"`
	// Errors are the bot's response_action errors by input block ID.
	Errors map[string]string `json:"errors,omitempty"`
	// Error is a problem with the whole view, such as the bot failing to
	// answer a submission.
	Error string `json:"error,omitempty"`

	fields viewFields
}

// viewFields are the parts of a view the simulator reads.
type viewFields struct {
	Type            string          `json:"type"`
	Title           json.RawMessage `json:"title"`
	Blocks          json.RawMessage `json:"blocks"`
	Close           json.RawMessage `json:"close,omitempty"`
	Submit          json.RawMessage `json:"submit,omitempty"`
	PrivateMetadata string          `json:"private_metadata"`
	CallbackID      string          `json:"callback_id"`
	ExternalID      string          `json:"external_id"`
	ClearOnClose    bool            `json:"clear_on_close"`
	NotifyOnClose   bool            `json:"notify_on_close"`
}

// Workspace is what the page needs to know about the world.
type Workspace struct {
	TeamID      string `json:"team_id"`
	ChannelID   string `json:"channel_id"`
	ChannelName string `json:"channel_name"`
	Bot         User   `json:"bot"`
	Users       []User `json:"users"`
	Command     string `json:"command"`
	Model       string `json:"model"`
	Hint        string `json:"hint"`
}

// State is everything the page shows: the messages in the order they were
// posted (ephemeral ones included), the stack of open modals of each
// person, the top one last, and the Home tab the bot published for each.
type State struct {
	Workspace Workspace         `json:"workspace"`
	Messages  []Message         `json:"messages"`
	Views     map[string][]View `json:"views"`
	Homes     map[string]View   `json:"homes"`
}

// Simulator is a Slack workspace with one channel. Create it with New;
// serve APIHandler and PageHandler. Its methods are safe for concurrent
// use.
type Simulator struct {
	opts Options
	log  logrus.FieldLogger

	mu       sync.Mutex
	lastTS   int64 // the last message timestamp handed out, in microseconds
	messages []*Message
	byTS     map[string]*Message
	views    map[string][]*View // by user: the stack, top last
	homes    map[string]*View   // by user: the Home tab
	triggers map[string]trigger
	subs     map[chan []byte]struct{}
	closed   bool
	token    string // the page token, see PageToken
	access   string // the access token in the page's URL, see PageURL
}

// trigger is a trigger_id handed out with an interaction.
type trigger struct {
	user   string
	issued time.Time
}

// triggerTTL is how long a trigger_id may be used to open a modal.
const triggerTTL = 3 * time.Second

// New returns a simulator.
func New(opts Options) *Simulator {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&opts.TeamID, DefaultTeamID)
	def(&opts.ChannelID, DefaultChannelID)
	def(&opts.ChannelName, DefaultChannelName)
	def(&opts.BotUserID, DefaultBotUserID)
	def(&opts.BotID, DefaultBotID)
	def(&opts.BotName, DefaultBotName)
	def(&opts.Command, DefaultCommand)
	if len(opts.Users) == 0 {
		opts.Users = DefaultUsers
	}
	opts.Users = slices.Clone(opts.Users)
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 3 * time.Second}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = randomID
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.Out = io.Discard
		opts.Logger = l
	}
	return &Simulator{
		token:    newPageToken(),
		access:   randomToken(32),
		opts:     opts,
		log:      opts.Logger,
		byTS:     map[string]*Message{},
		views:    map[string][]*View{},
		homes:    map[string]*View{},
		triggers: map[string]trigger{},
		subs:     map[chan []byte]struct{}{},
	}
}

// Workspace describes the simulated workspace.
func (s *Simulator) Workspace() Workspace {
	return Workspace{
		TeamID: s.opts.TeamID, ChannelID: s.opts.ChannelID, ChannelName: s.opts.ChannelName,
		Bot:   User{ID: s.opts.BotUserID, Name: s.opts.BotName},
		Users: slices.Clone(s.opts.Users), Command: s.opts.Command,
		Model: s.opts.Model, Hint: s.opts.Hint,
	}
}

// State returns a copy of everything the page shows.
func (s *Simulator) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state()
}

// state copies the state; s.mu is held.
func (s *Simulator) state() State {
	st := State{Workspace: s.Workspace(), Messages: make([]Message, 0, len(s.messages)), Views: map[string][]View{}}
	for _, m := range s.messages {
		st.Messages = append(st.Messages, *m)
	}
	for user := range s.views {
		st.Views[user] = s.userViews(user)
	}
	st.Homes = s.homeViews()
	return st
}

// userViews copies user's view stack; s.mu is held.
func (s *Simulator) userViews(user string) []View {
	out := []View{}
	for _, v := range s.views[user] {
		out = append(out, *v)
	}
	return out
}

// Close ends the page's event streams, for a server's shutdown (they
// would otherwise keep it waiting); the browser's reconnections find the
// server gone.
func (s *Simulator) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for ch := range s.subs {
		close(ch)
		delete(s.subs, ch)
	}
}

// user finds a person by ID.
func (s *Simulator) user(id string) (User, bool) {
	for _, u := range s.opts.Users {
		if u.ID == id {
			return u, true
		}
	}
	return User{}, false
}

// nextTS hands out a message timestamp from the clock, later than every
// earlier one; s.mu is held.
func (s *Simulator) nextTS() string {
	micros := max(s.opts.Now().UnixMicro(), s.lastTS+1)
	s.lastTS = micros
	return fmt.Sprintf("%d.%06d", micros/1_000_000, micros%1_000_000)
}

// addMessage stores a new message and tells the page; s.mu is held.
func (s *Simulator) addMessage(m Message) Message {
	m.TS = s.nextTS()
	s.messages = append(s.messages, &m)
	s.byTS[m.TS] = &m
	s.publish("message", m)
	return m
}

// newTrigger hands out a trigger_id for user; s.mu is held.
func (s *Simulator) newTrigger(user string) string {
	now := s.opts.Now()
	for id, t := range s.triggers {
		if now.Sub(t.issued) > triggerTTL {
			delete(s.triggers, id)
		}
	}
	id := fmt.Sprintf("%d.%s", now.UnixMilli(), s.opts.NewID())
	s.triggers[id] = trigger{user: user, issued: now}
	return id
}

// useTrigger spends a trigger_id, returning whose it was or Slack's
// error code; s.mu is held.
func (s *Simulator) useTrigger(id string) (string, string) {
	t, ok := s.triggers[id]
	if !ok {
		return "", "invalid_trigger_id"
	}
	delete(s.triggers, id)
	if s.opts.Now().Sub(t.issued) > triggerTTL {
		return "", "expired_trigger_id"
	}
	return t.user, ""
}

// publishViews tells the page about user's view stack; s.mu is held.
func (s *Simulator) publishViews(user string) {
	s.publish("views", map[string]any{"user": user, "views": s.userViews(user)})
}

// publish sends an event to every page; s.mu is held. A page that does
// not keep up is disconnected; its browser reconnects and starts again
// from a snapshot.
func (s *Simulator) publish(event string, data any) {
	frame := sseFrame(event, data)
	for ch := range s.subs {
		select {
		case ch <- frame:
		default:
			close(ch)
			delete(s.subs, ch)
		}
	}
}

// subscribe returns a stream of events that starts with a snapshot.
func (s *Simulator) subscribe() (chan []byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	ch := make(chan []byte, 256)
	ch <- sseFrame("snapshot", s.state())
	s.subs[ch] = struct{}{}
	return ch, true
}

func (s *Simulator) unsubscribe(ch chan []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[ch]; ok {
		delete(s.subs, ch)
		close(ch)
	}
}

// sseFrame is one server-sent event with data as JSON.
func sseFrame(event string, data any) []byte {
	raw, err := json.Marshal(data)
	if err != nil {
		raw, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, raw)
}

func randomID() string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}
