package graph

import (
	"context"
	"encoding/json"
	"errors"
)

// Errors the engine and stores return. Match them with errors.Is.
var (
	// ErrNoCheckpoint: the thread (or the checkpoint asked for) does not
	// exist.
	ErrNoCheckpoint = errors.New("no checkpoint")
	// ErrConflict: the stored head is not the one the writer started
	// from; someone else saved first. Nothing was written.
	ErrConflict = errors.New("checkpoint version conflict")
	// ErrNotPaused: Resume was asked of a thread that is not paused,
	// failed or cut off. Nothing was changed.
	ErrNotPaused = errors.New("thread is not paused")
	// ErrNotDone: Continue was asked of a thread whose run has not
	// finished.
	ErrNotDone = errors.New("thread's run has not finished")
	// ErrThreadExists: Start was asked of a thread that already has a
	// checkpoint.
	ErrThreadExists = errors.New("thread already exists")
	// ErrSchema: a checkpoint was written by a format this code cannot
	// read.
	ErrSchema = errors.New("unsupported checkpoint schema")
	// ErrUnconfirmed: the store wrote the checkpoint where it writes,
	// and is the thread's head there, but cannot say it will outlive a
	// failover (Redis replicas did not acknowledge it). The run takes it
	// as its current checkpoint, so that its next save follows it (a
	// save that says what became of the work it was about to do), and
	// returns the error: what depends on the save must not happen.
	ErrUnconfirmed = errors.New("checkpoint written but not confirmed durable")
)

// Store keeps checkpoints. Implementations must be safe for concurrent use
// by many goroutines and processes: Save is a compare-and-set on
// Checkpoint.Seq, and a Save that loses returns ErrConflict having written
// nothing.
type Store interface {
	// Load returns the thread's latest checkpoint with its whole journal,
	// or ErrNoCheckpoint.
	Load(ctx context.Context, thread string) (*Checkpoint, error)
	// Save makes cp the thread's latest checkpoint and adds it to the
	// history. cp.Seq must be the stored head's Seq+1 (1 for a new
	// thread), and cp.JournalFrom the stored journal's length; otherwise
	// Save returns ErrConflict. It appends cp.Journal to the stored
	// journal and never rewrites what is stored already.
	Save(ctx context.Context, cp *Checkpoint) error
	// History returns up to the store's history limit of the thread's
	// checkpoints, newest first, without journals.
	History(ctx context.Context, thread string) ([]*Checkpoint, error)
	// Journal returns the thread's first n journal entries.
	Journal(ctx context.Context, thread string, n int) ([]json.RawMessage, error)
}

// ErrNoInterrupt: Answer named an interrupt the run does not wait on.
var ErrNoInterrupt = errors.New("no such interrupt")
