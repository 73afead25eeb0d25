package graph

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/countersign/countersign/internal/jsonform"
	"github.com/countersign/countersign/interrupt"
)

// SchemaVersion is the checkpoint format this code writes. Load accepts
// this version and every older one listed in upgrade.
//
// Version 2 added Writes, Arrivals, Nested and Fingerprint, all omitted
// when empty; a version 1 checkpoint is a version 2 checkpoint without
// them (its Queued, written mid-step, is folded into the next step), so
// upgrade only relabels it.
const SchemaVersion = 2

// Status is where a run stands at a checkpoint.
type Status int

// The run statuses. Their JSON names are stable.
const (
	// Running: the run was between steps, or inside a node that saved
	// before a side effect. A thread whose head is Running and that no
	// process is working on was cut off by a crash.
	Running Status = iota + 1
	// Paused: the run waits for an answer to its interrupts.
	Paused
	// Done: the run reached End.
	Done
	// Failed: a node returned an error or panicked; Error says which.
	// Resuming re-runs the failed node; Final says when that cannot help.
	Failed
)

var statusNames = map[Status]string{Running: "running", Paused: "paused", Done: "done", Failed: "failed"}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s Status) MarshalText() ([]byte, error) {
	if n, ok := statusNames[s]; ok {
		return []byte(n), nil
	}
	return nil, fmt.Errorf("unknown status %d", int(s))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Status) UnmarshalText(b []byte) error {
	for st, n := range statusNames {
		if n == string(b) {
			*s = st
			return nil
		}
	}
	return fmt.Errorf("unknown status %q", b)
}

// Checkpoint is one saved point of a thread's run: enough to resume it.
//
// The state is stored in two parts. State holds the state's JSON without
// its journal; the journal (a conversation's messages) is append-only and
// is stored once per thread, so a save sends only the entries added since
// the previous save. See Journaled.
type Checkpoint struct {
	// Version is the schema version the checkpoint was written with.
	Version int `json:"v"`
	// Thread is the thread the checkpoint belongs to.
	Thread string `json:"thread"`
	// ID identifies the checkpoint within its thread's history.
	ID string `json:"id"`
	// Parent is the ID of the checkpoint this one follows, "" for the first.
	Parent string `json:"parent,omitempty"`
	// Seq counts the thread's saves: 1 for the first. Save succeeds only
	// when the stored head has Seq-1 (compare-and-set), so a stale writer
	// cannot overwrite newer state.
	Seq int64 `json:"seq"`
	// Step counts supersteps since the thread began.
	Step int `json:"step"`
	// Status is where the run stands.
	Status Status `json:"status"`
	// Next lists the nodes of the current step, in the order they were
	// scheduled (which is the merge order). Nodes of the step that have
	// already finished have a Done entry in Writes.
	Next []string `json:"next,omitempty"`
	// Queued lists nodes scheduled for the next step by nodes that have
	// finished. Checkpoints of schema 1 wrote it mid-step; this code only
	// reads it and folds it into the next step.
	Queued []string `json:"queued,omitempty"`
	// Writes hold, for a step of several nodes, each node's own copy of
	// the state: finished (Done, waiting to be merged at the end of the
	// step) or in progress (the state it paused or saved with, which it
	// re-runs from). A step of one node changes State in place and has no
	// writes.
	Writes []Write `json:"writes,omitempty"`
	// Arrivals records, per barrier (see Builder.AddJoin), the sources that
	// have finished since its target last ran.
	Arrivals map[string][]string `json:"arrivals,omitempty"`
	// Nested holds the checkpoint of each subgraph node that is part-way
	// through its run, keyed by node name (see Builder.AddSubgraph). It is
	// a whole checkpoint of the subgraph's own, journal included.
	Nested map[string]json.RawMessage `json:"nested,omitempty"`
	// Fingerprint identifies the graph that wrote the checkpoint, for the
	// compatibility check of a resume after a deploy. Checkpoints written
	// before fingerprints existed have none and resume under any graph.
	Fingerprint *Fingerprint `json:"fp,omitempty"`
	// Interrupts are the pauses a Paused run waits on.
	Interrupts []interrupt.Info `json:"interrupts,omitempty"`
	// Error is a Failed run's error.
	Error string `json:"error,omitempty"`
	// Final is set on a Failed run whose error says that running the
	// failed node again fails the same way (see IsFinal), so a front end
	// offers no retry. Checkpoints written before it existed have none:
	// their failures are retryable.
	Final bool `json:"final,omitempty"`
	// Config holds the per-run settings that a resume must honour.
	Config RunConfig `json:"config,omitzero"`
	// SkipBefore lists nodes whose interrupt-before was answered by the
	// resume that follows; they run without pausing again.
	SkipBefore []string `json:"skip_before,omitempty"`
	// State is the state's JSON, without the journal.
	State json.RawMessage `json:"state"`
	// JournalLen is the number of journal entries the state has.
	JournalLen int `json:"journal_len"`
	// JournalFrom and Journal carry journal entries [JournalFrom,
	// JournalLen). Load returns the whole journal (JournalFrom 0); Save
	// is given only the entries added since the stored head, and fails with
	// ErrConflict if the stored journal does not have JournalFrom entries.
	// History returns checkpoints without journals.
	JournalFrom int               `json:"-"`
	Journal     []json.RawMessage `json:"-"`
	// Created is when the checkpoint was written.
	Created time.Time `json:"created"`
	// KeepUntil, when set, is the earliest time a store may forget the
	// thread (the latest deadline of its interrupts).
	KeepUntil time.Time `json:"keep_until,omitzero"`
}

// Write is one node's copy of the state within a step of several nodes.
type Write struct {
	Node string `json:"node"`
	// Done: the node finished and its changes wait for the merge at the
	// end of the step. Otherwise the node paused or saved mid-way with
	// this state, and runs again from it.
	Done bool `json:"done,omitempty"`
	// State is the state's JSON without the journal; Journal the entries
	// the node appended beyond the checkpoint's JournalLen.
	State   json.RawMessage   `json:"state"`
	Journal []json.RawMessage `json:"journal,omitempty"`
}

// RunConfig holds per-run settings that are saved with the run.
type RunConfig struct {
	// InterruptBefore and InterruptAfter name nodes to pause before or
	// after, in addition to the graph's compile-time ones.
	InterruptBefore []string `json:"interrupt_before,omitempty"`
	InterruptAfter  []string `json:"interrupt_after,omitempty"`
}

// Meta returns a copy of the checkpoint without its journal entries, as
// History returns it.
func (c *Checkpoint) Meta() *Checkpoint {
	m := *c
	m.JournalFrom, m.Journal = 0, nil
	return &m
}

// upgrade brings a checkpoint written by an older schema to SchemaVersion.
func upgrade(cp *Checkpoint) error {
	switch cp.Version {
	case SchemaVersion:
		return nil
	case 1:
		cp.Version = SchemaVersion
		return nil
	default:
		return fmt.Errorf("%w: version %d", ErrSchema, cp.Version)
	}
}

// MarshalMeta returns the checkpoint's JSON without its journal, byte
// for byte what json.Marshal returns, for a store to save, at a fraction
// of the cost. It writes the fields a checkpoint usually has itself, not
// through reflection, and appends State and the interrupts' payloads as
// they are when they are valid JSON that is already compact, where
// json.Marshal would copy them again to compact them: the engine wrote
// them with json.Marshal, and State is most of a checkpoint. The rarer
// fields (Writes, Arrivals, Nested, Config) go through json.Marshal.
func (c *Checkpoint) MarshalMeta() ([]byte, error) {
	b := make([]byte, 0, c.metaSize())
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(c.Version), 10)
	b = append(b, `,"thread":`...)
	b = jsonform.AppendString(b, c.Thread)
	b = append(b, `,"id":`...)
	b = jsonform.AppendString(b, c.ID)
	if c.Parent != "" {
		b = append(b, `,"parent":`...)
		b = jsonform.AppendString(b, c.Parent)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, c.Seq, 10)
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, int64(c.Step), 10)
	status, ok := statusNames[c.Status] // MarshalText's, without its copy
	if !ok {
		_, err := c.Status.MarshalText()
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	var err error
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, '"')
	if len(c.Next) > 0 {
		b = append(b, `,"next":`...)
		b = jsonform.AppendStrings(b, c.Next)
	}
	if len(c.Queued) > 0 {
		b = append(b, `,"queued":`...)
		b = jsonform.AppendStrings(b, c.Queued)
	}
	if len(c.Writes) > 0 {
		if b, err = appendField(b, "writes", c.Writes); err != nil {
			return nil, err
		}
	}
	if len(c.Arrivals) > 0 {
		if b, err = appendField(b, "arrivals", c.Arrivals); err != nil {
			return nil, err
		}
	}
	if len(c.Nested) > 0 {
		if b, err = appendField(b, "nested", c.Nested); err != nil {
			return nil, err
		}
	}
	if fp := c.Fingerprint; fp != nil {
		b = append(b, `,"fp":`...)
		if fp.json != nil {
			b = append(b, fp.json...)
		} else {
			b = fp.appendJSON(b)
		}
	}
	if len(c.Interrupts) > 0 {
		b = append(b, `,"interrupts":[`...)
		for i, in := range c.Interrupts {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendInterrupt(b, in); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if c.Error != "" {
		b = append(b, `,"error":`...)
		b = jsonform.AppendString(b, c.Error)
		if c.Final { // only a failure has it
			b = append(b, `,"final":true`...)
		}
	}
	if c.Config.InterruptBefore != nil || c.Config.InterruptAfter != nil { // omitzero
		if b, err = appendField(b, "config", c.Config); err != nil {
			return nil, err
		}
	}
	if len(c.SkipBefore) > 0 {
		b = append(b, `,"skip_before":`...)
		b = jsonform.AppendStrings(b, c.SkipBefore)
	}
	b = append(b, `,"state":`...)
	if b, err = jsonform.AppendRaw(b, c.State); err != nil {
		return nil, fmt.Errorf("encode checkpoint: state: %w", err)
	}
	b = append(b, `,"journal_len":`...)
	b = strconv.AppendInt(b, int64(c.JournalLen), 10)
	b = append(b, `,"created":`...)
	if b, err = appendTime(b, c.Created); err != nil {
		return nil, err
	}
	if !c.KeepUntil.IsZero() {
		b = append(b, `,"keep_until":`...)
		if b, err = appendTime(b, c.KeepUntil); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendJSON appends the fingerprint's JSON, as json.Marshal writes it.
func (fp *Fingerprint) appendJSON(b []byte) []byte {
	b = append(b, `{"g":`...)
	b = jsonform.AppendString(b, fp.Graph)
	if len(fp.Nodes) > 0 {
		b = append(b, `,"n":`...)
		b = appendStringMap(b, fp.Nodes)
	}
	if len(fp.Parts) > 0 {
		b = append(b, `,"p":`...)
		b = appendStringMap(b, fp.Parts)
	}
	if fp.StateVersion != 0 {
		b = append(b, `,"sv":`...)
		b = strconv.AppendInt(b, int64(fp.StateVersion), 10)
	}
	return append(b, '}')
}

// metaSize is about the length of MarshalMeta's JSON, for its buffer to
// be made once: the fields of a set length, then those that grow with
// the checkpoint (the state, the interrupts, the fingerprint).
func (c *Checkpoint) metaSize() int {
	n := 256 + len(c.State) + len(c.Error)
	for _, in := range c.Interrupts {
		n += 128 + len(in.ID) + len(in.Reason) + len(in.Payload)
		for _, p := range in.Path {
			n += 4 + len(p)
		}
	}
	if fp := c.Fingerprint; fp != nil {
		n += 32 + len(fp.Graph) + len(fp.json)
		for k, v := range fp.Nodes {
			n += 8 + len(k) + len(v)
		}
		for k, v := range fp.Parts {
			n += 8 + len(k) + len(v)
		}
	}
	return n
}

// appendField appends a field that follows another, its value encoded
// by json.Marshal.
func appendField(b []byte, name string, value any) ([]byte, error) {
	v, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %s: %w", name, err)
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return append(b, v...), nil
}

func appendInterrupt(b []byte, in interrupt.Info) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = jsonform.AppendString(b, in.ID)
	b = append(b, `,"path":`...)
	if in.Path == nil {
		b = append(b, "null"...)
	} else {
		b = jsonform.AppendStrings(b, in.Path)
	}
	b = append(b, `,"reason":`...)
	b = jsonform.AppendString(b, in.Reason)
	var err error
	if len(in.Payload) > 0 {
		b = append(b, `,"payload":`...)
		if b, err = jsonform.AppendRaw(b, in.Payload); err != nil {
			return nil, fmt.Errorf("encode checkpoint: interrupt %s: %w", in.ID, err)
		}
	}
	if !in.Deadline.IsZero() {
		b = append(b, `,"deadline":`...)
		if b, err = appendTime(b, in.Deadline); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendTime appends t as jsonform.AppendTime does, failing with a
// checkpoint's error.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b, err := jsonform.AppendTime(b, t)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return b, nil
}

// appendStringMap appends m with its keys sorted, as json.Marshal does.
func appendStringMap(b []byte, m map[string]string) []byte {
	b = append(b, '{')
	if len(m) == 1 { // most often: nothing to sort
		for k, v := range m {
			b = jsonform.AppendString(b, k)
			b = append(b, ':')
			b = jsonform.AppendString(b, v)
		}
		return append(b, '}')
	}
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonform.AppendString(b, k)
		b = append(b, ':')
		b = jsonform.AppendString(b, m[k])
	}
	return append(b, '}')
}
