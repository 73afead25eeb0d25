// Package elicit asks people in Slack threads for what a tool needs: the
// input an MCP server asks for during a call (this file), the input
// requests of a run paused for them (pause.go), and a connection to a
// server that runs calls as the person who asked for them (connect.go).
//
// A tool (an MCP server) asks, during a call, for input from the person
// who asked for the run. The question is posted in the run's thread with
// three buttons: Answer opens a form built from the requested schema,
// Decline and Cancel answer at once. Only the person who asked for the
// run may answer; the first answer counts. The answer travels through the
// store's mailbox to the process whose call is waiting, whichever replica
// received the click (the handlers package takes the clicks). No answer
// before the call's deadline cancels the request, and the message says
// so.
//
// A request is saved in the store like a card: what was asked, of whom,
// until when, and, once given, its answer. It outlives the process that
// asked: if that process dies while the form waits, the message's buttons
// still work on any replica, and the answer is kept. The call itself was
// cut off with its process (a stdio server dies with it), so it runs
// again as any call cut off by a crash does (at once if it is
// idempotent, else when a person chooses Retry on the outcome-unknown
// card). When its server then asks the same question in the same call,
// the saved request is used again rather than a new one posted: an answer
// given meanwhile is the answer at once, otherwise the same message waits
// for one, its deadline now the new attempt's.
package elicit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackretry"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// Store keeps requests and their answers. *redisstore.Store is one.
type Store interface {
	PutRef(ctx context.Context, ref string, value []byte, ttl time.Duration) error
	Ref(ctx context.Context, ref string) ([]byte, bool, error)
	Claim(ctx context.Context, thread, key string, value []byte) (winner []byte, won bool, err error)
	ClaimValues(ctx context.Context, thread string, keys []string) (map[string][]byte, error)
}

// Inbox receives the answer delivered for a request, from whichever
// process took the click. *redisstore.Store is one.
type Inbox interface {
	Receive(ctx context.Context, box string) ([]byte, error)
}

// Record is what a request's buttons stand for, kept in the store under
// Ref(id).
type Record struct {
	Thread    string          `json:"thread"`
	Requester string          `json:"requester"`
	Tool      string          `json:"tool"`
	Message   string          `json:"message"`
	Schema    json.RawMessage `json:"schema"`
	Deadline  time.Time       `json:"deadline"`
	// Call and Attempt are the call and the attempt that asked; TS is
	// the message that asks.
	Call    string `json:"call,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	TS      string `json:"ts,omitempty"`
	// Channel is where that message is when it is not in the thread's
	// channel: the person's direct message with the bot, when the
	// thread's channel refused it.
	Channel string `json:"channel,omitempty"`
	// Paused says the request belongs to a paused run (pause.go): its
	// answer goes to the runner (runner.Service.Answer), not to a
	// waiting call; Input is the request's key.
	Paused bool   `json:"paused,omitempty"`
	Input  string `json:"input,omitempty"`
}

// TTL is how long a request's record outlives its deadline.
const TTL = time.Hour

// Closed is the claim of a request that nobody answered in time; an
// answer is claimed in the request's thread under Ref(id) before it is
// delivered to the mailbox box Ref(id).
const Closed = "closed"

// Ref is the store key of request id: its record, its claim in the
// thread, and its mailbox.
func Ref(id string) string { return "elicit:" + id }

// callRef names a call's request for one question: the thread, the call,
// the tool, the message and the schema.
func callRef(el tools.Elicitation) string {
	h := sha256.New()
	for _, part := range []string{el.Call.Thread, el.Call.Call, el.Tool, el.Message, string(el.Schema)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "elicit-call:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Elicitor posts requests for input and waits for their answers. It is a
// tools.Elicitor, safe for concurrent use.
type Elicitor struct {
	api   *slack.Client
	store Store
	inbox Inbox
	log   logrus.FieldLogger
}

var _ tools.Elicitor = (*Elicitor)(nil)

// New returns an Elicitor that posts through api, keeps its requests in
// store and receives their answers from inbox.
func New(api *slack.Client, store Store, inbox Inbox, log logrus.FieldLogger) *Elicitor {
	if log == nil {
		l := logrus.New()
		l.Out = io.Discard
		log = l
	}
	return &Elicitor{api: api, store: store, inbox: inbox, log: log}
}

// Elicit posts the question in the call's thread and waits for the
// answer until ctx ends; then the message says that nobody answered.
func (e *Elicitor) Elicit(ctx context.Context, el tools.Elicitation) (tools.ElicitAnswer, error) {
	_, channel, root, err := slackui.ParseThread(el.Call.Thread)
	if err != nil {
		return tools.ElicitAnswer{}, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(24 * time.Hour)
	}
	ttl := time.Until(deadline) + TTL
	log := e.log.WithFields(logrus.Fields{"thread": el.Call.Thread, "call": el.Call.Call, "tool": el.Tool})
	byCall := callRef(el)
	id, rec, saved, found := e.earlier(ctx, byCall, el.Call.Attempt)
	switch {
	case found && saved != nil:
		log.WithField("action", string(saved.Action)).Info("the call asked again; answered with the answer given before")
		return *saved, nil
	case found:
		// Still waiting: the same message waits on, until the new deadline.
		rec.Deadline, rec.Attempt = deadline, el.Call.Attempt
		if err := e.save(ctx, id, rec, byCall, ttl); err != nil {
			return tools.ElicitAnswer{}, err
		}
		if rec.TS != "" {
			err := slackretry.Update(ctx, e.api, channel, rec.TS, slack.MsgOptionText(slackui.ElicitText(rec.Tool, rec.Message), false),
				slack.MsgOptionBlocks(slackui.ElicitMessage(rec.Requester, rec.Tool, rec.Message, rec.Deadline, id)...))
			if err != nil {
				log.WithError(err).Warn("updating the deadline of a request for input")
			}
		}
		log.Info("the call asked again; the request already posted waits for the answer")
	default:
		rec = Record{Thread: el.Call.Thread, Requester: el.Call.Requester, Tool: el.Tool, Message: el.Message, Schema: el.Schema,
			Deadline: deadline, Call: el.Call.Call, Attempt: el.Call.Attempt}
		if id, err = randomID(); err != nil {
			return tools.ElicitAnswer{}, err
		}
		if err := e.save(ctx, id, rec, "", ttl); err != nil {
			return tools.ElicitAnswer{}, err
		}
		ts, err := slackretry.Post(ctx, e.api, channel, slack.MsgOptionTS(root),
			slack.MsgOptionText(slackui.ElicitText(rec.Tool, rec.Message), false), slack.MsgOptionBlocks(slackui.ElicitMessage(rec.Requester, rec.Tool, rec.Message, rec.Deadline, id)...))
		if err != nil {
			return tools.ElicitAnswer{}, fmt.Errorf("post elicitation: %w", err)
		}
		rec.TS = ts
		if err := e.save(ctx, id, rec, byCall, ttl); err != nil {
			return tools.ElicitAnswer{}, err
		}
		log.Info("asked the requester for input")
	}
	data, err := e.inbox.Receive(ctx, Ref(id))
	if err != nil {
		// Whoever answers now is told it is too late.
		bg := context.WithoutCancel(ctx)
		if _, first, derr := e.store.Claim(bg, rec.Thread, Ref(id), []byte(Closed)); derr == nil && first {
			Settle(bg, e.api, e.log, channel, rec.TS, rec, slackui.TextElicitTimedOut)
		}
		return tools.ElicitAnswer{}, err
	}
	var ans tools.ElicitAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return tools.ElicitAnswer{}, fmt.Errorf("elicitation answer: %w", err)
	}
	log.WithField("action", string(ans.Action)).Info("the requester answered")
	return ans, nil
}

// earlier finds the request an earlier attempt of the call made with the
// same question, and its answer if it has one (the answer is claimed in
// the thread, see Closed). A request that expired is not used again.
func (e *Elicitor) earlier(ctx context.Context, byCall string, attempt int) (string, Record, *tools.ElicitAnswer, bool) {
	var rec Record
	raw, ok, err := e.store.Ref(ctx, byCall)
	if err != nil || !ok {
		return "", rec, nil, false
	}
	id := string(raw)
	raw, ok, err = e.store.Ref(ctx, Ref(id))
	if err != nil || !ok || json.Unmarshal(raw, &rec) != nil || rec.Attempt == attempt {
		return "", rec, nil, false
	}
	claims, err := e.store.ClaimValues(ctx, rec.Thread, []string{Ref(id)})
	if err != nil {
		return "", rec, nil, false
	}
	v, answered := claims[Ref(id)]
	if !answered {
		return id, rec, nil, true
	}
	var ans tools.ElicitAnswer
	if string(v) == Closed || json.Unmarshal(v, &ans) != nil {
		return "", rec, nil, false
	}
	return id, rec, &ans, true
}

// save stores a request, and, if byCall is set, that it is its call's
// request for its question.
func (e *Elicitor) save(ctx context.Context, id string, rec Record, byCall string, ttl time.Duration) error {
	raw, _ := json.Marshal(rec)
	if err := e.store.PutRef(ctx, Ref(id), raw, ttl); err != nil {
		return fmt.Errorf("store elicitation: %w", err)
	}
	if byCall == "" {
		return nil
	}
	if err := e.store.PutRef(ctx, byCall, []byte(id), ttl); err != nil {
		return fmt.Errorf("store elicitation: %w", err)
	}
	return nil
}

// Settle redraws the message ts that asks rec's question without its
// buttons, line saying how it ended.
func Settle(ctx context.Context, api *slack.Client, log logrus.FieldLogger, channel, ts string, rec Record, line string) {
	blocks := []slack.Block{slackui.ElicitQuestion(rec.Requester, rec.Tool, rec.Message), slackui.ContextBlock(line)}
	err := slackretry.Update(ctx, api, channel, ts, slack.MsgOptionText(slackui.ElicitText(rec.Tool, rec.Message), false), slack.MsgOptionBlocks(blocks...))
	if err != nil {
		log.WithError(err).Warn("updating an elicitation message")
	}
}

func randomID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
