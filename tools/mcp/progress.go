package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/tools"
)

// Every call asks for progress (a progress token in its request's _meta).
// Each progress notification of the call pushes its deadline back to a
// full timeout from then, but never past MaxCall(timeout) from the
// call's start, and is shown to people through the
// ProgressReporter (on the call's card). A server that says nothing has
// its calls ended by its timeout, as before.

// MaxCall is how long progress can keep a call going, for a server whose
// timeout is timeout: ten times it, and no more than an hour unless the
// timeout itself is longer.
func MaxCall(timeout time.Duration) time.Duration {
	return max(timeout, min(10*timeout, time.Hour))
}

// ProgressReporter shows a running call's progress to people. total is 0
// when the server does not know it; message is the server's words, if
// any. It must not block.
type ProgressReporter interface {
	CallProgress(ctx context.Context, call tools.CallInfo, progress, total float64, message string)
}

// errCallTimeout is the cause of a call's end at its deadline.
var errCallTimeout = errors.New("the call's time is up")

// callDeadline ends a call at its deadline, which progress pushes back.
type callDeadline struct {
	timeout time.Duration
	limit   time.Time // the latest the deadline may be
	mu      sync.Mutex
	at      time.Time
	timer   *time.Timer
}

// withDeadline returns ctx ending after timeout, and the deadline that
// progress may push back to at most MaxCall(timeout) from now.
func withDeadline(ctx context.Context, timeout time.Duration) (context.Context, *callDeadline, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	now := time.Now()
	d := &callDeadline{timeout: timeout, limit: now.Add(MaxCall(timeout)), at: now.Add(timeout)}
	d.timer = time.AfterFunc(timeout, func() { cancel(errCallTimeout) })
	return ctx, d, func() { d.timer.Stop(); cancel(context.Canceled) }
}

// extend pushes the deadline to a full timeout from now, within the
// limit.
func (d *callDeadline) extend() {
	d.mu.Lock()
	defer d.mu.Unlock()
	at := time.Now().Add(d.timeout)
	if at.After(d.limit) {
		at = d.limit
	}
	if at.After(d.at) && d.timer.Stop() {
		d.at = at
		d.timer.Reset(time.Until(at))
	}
}

func (d *callDeadline) deadline() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

var progressTokens atomic.Int64

// newProgressToken is a token no other call of this process has.
func newProgressToken() string {
	return "countersign-" + strconv.FormatInt(progressTokens.Add(1), 10)
}

// progress handles a server's progress notification: the call it is
// for gets more time, and people are shown it.
func (s *server) progress(ctx context.Context, req *sdk.ProgressNotificationClientRequest) {
	p := req.Params
	token, _ := p.ProgressToken.(string)
	s.mu.Lock()
	var c *inflight
	for call := range s.inflight {
		if call.token == token {
			c = call
		}
	}
	s.mu.Unlock()
	if c == nil {
		s.log.WithField("token", token).Debug("progress for no call in flight; ignored")
		return
	}
	c.dl.extend()
	if rep := s.m.progressReporter(); rep != nil && c.info.Thread != "" {
		rep.CallProgress(ctx, c.info, p.Progress, p.Total, s.redact(p.Message))
	}
}

// maxLogData bounds what of a server's log message is logged.
const maxLogData = 1000

// logMessage writes a server's log notification to the bot's log, at the
// level the server gave, with the server's name. It never reaches the
// model.
func (s *server) logMessage(_ context.Context, req *sdk.LoggingMessageRequest) {
	p := req.Params
	data, ok := p.Data.(string)
	if !ok {
		b, err := json.Marshal(p.Data)
		if err != nil {
			return
		}
		data = string(b)
	}
	log := s.log.WithFields(logrus.Fields{"server_level": string(p.Level), "data": tools.CapText(s.redact(data), maxLogData)})
	if p.Logger != "" {
		log = log.WithField("logger", tools.CapText(p.Logger, 100))
	}
	const msg = "MCP server log"
	switch p.Level {
	case "debug":
		log.Debug(msg)
	case "info", "notice":
		log.Info(msg)
	case "warning":
		log.Warn(msg)
	default: // error, critical, alert, emergency, and what is not known
		log.Error(msg)
	}
}
