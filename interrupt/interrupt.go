// Package interrupt is the vocabulary for pausing a graph run: the typed
// interrupt error a node returns (New, InterruptAndRerun) and the
// information it carries (Info, Extract). What a person decides about a
// paused tool call is the agent's (agent.Decision), which applies it.
//
// It depends on the standard library only, so the graph engine and
// everything above it can share it. It does not save or resume anything;
// the graph package does that.
package interrupt

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrInterruptAndRerun asks the engine to pause the run at the node that
// returned it and to run that node again, from the state it had, when the
// thread is resumed. It carries no payload; use New for a pause that tells
// the outside world what it waits for.
var ErrInterruptAndRerun = errors.New("interrupt and rerun")

// InterruptAndRerun is ErrInterruptAndRerun, as a value a node can return.
func InterruptAndRerun() error { return ErrInterruptAndRerun }

// Info describes one pause.
type Info struct {
	// ID is stable: reaching the same pause again (the same step, node and
	// position within the node) yields the same ID, so a front end can
	// recognise a pause it has already shown. The engine fills it in.
	ID string `json:"id"`
	// Path is the node path of the node that paused, e.g. ["tools"].
	Path []string `json:"path"`
	// Reason says why the run paused, e.g. "approval" or "before:tools".
	Reason string `json:"reason"`
	// Payload is what the pause waits for, as JSON (for the agent: the
	// tool calls that need a decision).
	Payload json.RawMessage `json:"payload,omitempty"`
	// Deadline, when set, is when the pause may be given up on (an
	// approval's expiry). Stores keep a paused thread at least until then.
	Deadline time.Time `json:"deadline,omitzero"`
}

// Error is the typed error a node returns to pause the run.
type Error struct {
	Info Info
}

func (e *Error) Error() string {
	return fmt.Sprintf("interrupt %s: %s", e.Info.ID, e.Info.Reason)
}

// New returns an interrupt error carrying info. The engine assigns info.ID
// and info.Path when it catches the error.
func New(info Info) error { return &Error{Info: info} }

// Extract reports whether err is, or wraps, an interrupt, and returns its
// Info. ErrInterruptAndRerun yields an Info with Reason "rerun".
func Extract(err error) (*Info, bool) {
	if err == nil {
		return nil, false
	}
	var ie *Error
	if errors.As(err, &ie) {
		info := ie.Info
		return &info, true
	}
	if errors.Is(err, ErrInterruptAndRerun) {
		return &Info{Reason: "rerun"}, true
	}
	return nil, false
}
