package runner

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// A conversation's opening folded into its first save. Start does not
// take the thread's lease before it runs the model: it makes the lease's
// token itself, and the run's first save (the one that creates the
// thread) takes the lease in the same atomic step, failing with nothing
// written if another acquisition holds it or the thread exists. When
// that save is also the session's last (a pause, an answer, a failure),
// the lease is taken and let go in one step. So a turn-1 cycle costs no
// round trip for the opening.
//
// What the lease taken first used to give, and how it is kept:
//
//   - Exclusion. Two starts of one thread may both ask the model; only
//     the one whose first save lands creates the thread, and nothing is
//     shown before a save (a start that streams answers as the model
//     writes them shows before it saves, so it opens the thread first,
//     as before).
//   - A reply typed while the first answer is being made finds no head.
//     It is kept with the thread (KeepReply) while the thread still has
//     none, and the first save hands what was kept to the start. Keeping
//     and the first save are each one atomic step on the thread's keys,
//     so a reply is either kept and handed over, or finds the head and
//     is handled as any reply. A front end with a durable record of each
//     request sets a KeptCarrier: Reply says ErrKept, the front end keeps
//     the reply's request due (so that a process that dies after the
//     first save loses nothing), and once the start's run stops it gives
//     the carrier the replies it kept, to carry on through the front
//     end's own reply path, which tells their authors what any reply is
//     told. Without a carrier the start applies them itself.
//   - A crash before the first save leaves nothing: the request stays
//     due and is carried on. The first save that does not end the
//     session sets the thread's wake-up, as the opening did, so a thread
//     whose process dies is looked at again.
//   - Every later save is fenced by the token the first save took, and
//     the lease is renewed from then on.

// FirstSave is what a start's first save is asked besides the checkpoint
// (WithFirstSave): to take the thread's lease for Token, for TTL, if
// nobody holds it, and to create the thread only if it does not exist;
// to move the thread's wake-up no later than Wake (zero: leave it) if the
// save does not end the session; and to hand over the replies KeepReply
// kept. A store that does it calls Took; the save is fenced by Token
// (graph.WithFence) as any other, so a store that cannot take the lease
// refuses it, having written nothing.
type FirstSave struct {
	Thread, Token string
	TTL           time.Duration
	Wake          time.Time

	mu      sync.Mutex
	took    bool
	sent    time.Time
	replies [][]byte
}

// Took says that the save took the lease (and, if it ended the session,
// let go of it), as sent when the save was sent, and handed over replies,
// the kept replies in the order they came.
func (f *FirstSave) Took(sent time.Time, replies [][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.took, f.sent, f.replies = true, sent, replies
}

// Taken reports whether the save took the lease.
func (f *FirstSave) Taken() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.took
}

// Replies returns the replies the save handed over (Took).
func (f *FirstSave) Replies() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replies
}

func (f *FirstSave) result() (took bool, sent time.Time, replies [][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.took, f.sent, f.replies
}

type firstSaveKey struct{}

// WithFirstSave returns ctx for the saves of a start's run; the store
// applies f to the one that creates the thread, until f is Taken.
func WithFirstSave(ctx context.Context, f *FirstSave) context.Context {
	return context.WithValue(ctx, firstSaveKey{}, f)
}

// FirstSaveOf returns what the first save of the run ctx belongs to is
// asked besides the checkpoint, or nil (a run that is not a start's, or
// whose first save was made).
func FirstSaveOf(ctx context.Context) *FirstSave {
	f, _ := ctx.Value(firstSaveKey{}).(*FirstSave)
	if f == nil || f.Taken() {
		return nil
	}
	return f
}

// Kept is what KeepReply did with a reply.
type Kept int

const (
	// NotKept: the thread has a head; the reply is handled as any.
	NotKept Kept = iota
	// KeptReply: the thread had no head; the reply is kept for the
	// first save to hand over.
	KeptReply
	// KeptNot: the thread has no head, but its lease is held (a start
	// that took it before running, or anyone who looks at the thread):
	// wait for the lease, then look again.
	KeptNot
)

// keptReplyTTL is how long a kept reply waits for the first save of its
// thread: well beyond a start's first model call, and a retried start's.
const keptReplyTTL = 15 * time.Minute

// KeptReplyTTL is how long a kept reply waits for the first save of its
// thread: a front end that keeps a kept reply's request due (ErrKept)
// looks at it again after this long at the latest.
const KeptReplyTTL = keptReplyTTL

// keptReply is a kept reply as stored.
type keptReply struct {
	Team    string `json:"team,omitempty"`
	Channel string `json:"channel,omitempty"`
	By      string `json:"by"`
	Text    string `json:"text"`
	TS      string `json:"ts,omitempty"`
	Ref     string `json:"ref,omitempty"`
}

// keepReply keeps m for the first save of its thread, if the thread has
// no head.
func (s *Service) keepReply(ctx context.Context, m Message) (Kept, error) {
	raw, err := json.Marshal(keptReply{Team: m.Team, Channel: m.Channel, By: m.By, Text: m.Text, TS: m.TS, Ref: m.Ref})
	if err != nil {
		return NotKept, err
	}
	return s.store.KeepReply(ctx, m.Thread, raw, keptReplyTTL)
}

// takeBackReply takes m back from the replies kept for its thread's
// first save (what keepReply kept of it, the same bytes), unless the
// thread has a head: started.
func (s *Service) takeBackReply(ctx context.Context, m Message) (started bool, err error) {
	raw, err := json.Marshal(keptReply{Team: m.Team, Channel: m.Channel, By: m.By, Text: m.Text, TS: m.TS, Ref: m.Ref})
	if err != nil {
		return false, err
	}
	return s.store.TakeBackReply(ctx, m.Thread, raw)
}

// keptReplies decodes the replies a first save handed over and leaves out
// those written before the request that started the conversation (a
// mention in a thread where people talked before it), and repeats of one
// request (a reply kept again by a later look).
func (s *Service) keptReplies(req StartRequest, raw [][]byte) []Message {
	var out []Message
	seen := map[string]bool{}
	for _, b := range raw {
		var k keptReply
		if err := json.Unmarshal(b, &k); err != nil {
			s.log.WithField("thread", req.Thread).WithError(err).Warn("a kept reply cannot be read; dropping it")
			continue
		}
		if req.TS != "" && k.TS != "" && !tsAfter(k.TS, req.TS) {
			continue
		}
		if k.Ref != "" {
			if seen[k.Ref] {
				continue
			}
			seen[k.Ref] = true
		}
		out = append(out, Message{Thread: req.Thread, Team: k.Team, Channel: k.Channel, By: k.By, Text: k.Text, TS: k.TS, Ref: k.Ref, Kept: true})
	}
	return out
}

// tsAfter reports whether message time stamp a (Slack's "seconds.micros")
// is later than b. It compares the digits as written, in time linear in
// their length whatever a stamp holds; stamps of another form compare as
// strings.
func tsAfter(a, b string) bool {
	as, af, okA := splitTS(a)
	bs, bf, okB := splitTS(b)
	if !okA || !okB {
		return a > b
	}
	if len(as) != len(bs) {
		return len(as) > len(bs)
	}
	if as != bs {
		return as > bs
	}
	return af > bf
}

// splitTS splits a time stamp into its seconds without leading zeros and
// its fraction without trailing zeros, both digits only (so that longer
// is larger for seconds, and string order is number order for each).
func splitTS(ts string) (sec, frac string, ok bool) {
	sec, frac, _ = strings.Cut(strings.TrimSpace(ts), ".")
	if sec == "" || !allDigits(sec) || !allDigits(frac) {
		return "", "", false
	}
	return strings.TrimLeft(sec, "0"), strings.TrimRight(frac, "0"), true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// KeptCarrier carries on replies kept while a conversation started, once
// its first save is made and its run has stopped: each through the front
// end's own reply path (Reply, with the reply's Kept set), so that its
// author is told what any reply's author is. Replies left out of the
// conversation (written before its request) are not given.
type KeptCarrier func(ctx context.Context, replies []Message)

// SetKeptCarrier makes carry the front end's carrier of kept replies:
// from then on, a reply kept for a first save makes Reply return
// ErrKept, and the start gives the replies its first save handed over to
// carry rather than applying them itself. A front end that keeps each
// reply's request durably sets it, before it takes any reply.
func (s *Service) SetKeptCarrier(carry KeptCarrier) {
	if carry == nil {
		s.carrier.Store(nil)
		return
	}
	s.carrier.Store(&carry)
}

// carryOnKept gives the replies kept during a start to the front end's
// carrier, or applies them itself if it has none.
func (s *Service) carryOnKept(ctx context.Context, replies []Message) {
	if len(replies) == 0 {
		return
	}
	if carry := s.carrier.Load(); carry != nil {
		(*carry)(ctx, replies)
		return
	}
	s.applyKept(ctx, replies)
}

// applyKept hands the replies kept during a start to the conversation,
// one after another, as Reply would have when they came.
func (s *Service) applyKept(ctx context.Context, replies []Message) {
	for _, m := range replies {
		if err := s.Reply(ctx, m); err != nil {
			s.log.WithFields(logrus.Fields{"thread": m.Thread, "user": m.By}).WithError(err).
				Warn("a reply kept while the conversation started was not taken")
		}
	}
}
