package graph

import "context"

// A fence says on whose behalf a run writes: the token of the
// acquisition of the thread's lease the run holds — unique to that
// acquisition, not the process's name. A store that keeps leases
// (redisstore) saves a checkpoint only while the thread's lease still
// holds that token, in the same atomic step as the save, so a run that
// stalled past its lease cannot overwrite what the next holder wrote —
// nor save a call as running and then run it — even when the next holder
// is a later run of its own process. A store without leases ignores it.
//
// The token travels in the context because it belongs to the run, not
// to the state: it is never stored and never resumes anything.

type fenceKey struct{}

// WithFence returns a context whose saves are fenced by token.
func WithFence(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, fenceKey{}, token)
}

// Fence returns the context's fencing token, or "".
func Fence(ctx context.Context) string {
	token, _ := ctx.Value(fenceKey{}).(string)
	return token
}

// A run's last save — the checkpoint where it pauses, finishes or fails —
// may carry more than the checkpoint: the caller that holds the lease may
// end its work on the thread in the same write (a store that can writes
// the caller's records with the checkpoint, atomically). The engine knows
// which save is the last one only when it makes it, so the caller gives
// it a hook: before writing such a checkpoint, a top-level run (not a
// subgraph's) calls it with the result the save makes, and saves in the
// context it returns. The hook must not fail; what it adds is the
// store's to write or to ignore.

type lastSaveKey[S any] struct{}

// LastSaveFunc is the hook of WithLastSave: it returns the context in
// which the run's last save of res is made. res, its checkpoint
// included, is the run's own: the hook reads it while it runs, and keeps
// and changes nothing of it.
type LastSaveFunc[S any] func(ctx context.Context, res *Result[S]) context.Context

// WithLastSave returns a context whose runs of a Graph[S] call fn before
// the save of a checkpoint that pauses, finishes or fails the run, and
// make that save in the context fn returns.
func WithLastSave[S any](ctx context.Context, fn LastSaveFunc[S]) context.Context {
	return context.WithValue(ctx, lastSaveKey[S]{}, fn)
}

// lastSave returns the context for the save of cp, the run's last save
// if cp's status is not Running.
func (r *run[S]) lastSave(ctx context.Context, cp *Checkpoint) context.Context {
	if !r.top || cp.Status == Running {
		return ctx
	}
	fn, _ := ctx.Value(lastSaveKey[S]{}).(LastSaveFunc[S])
	if fn == nil {
		return ctx
	}
	return fn(ctx, &Result[S]{Checkpoint: cp, State: r.state}) // read only: no copy of cp
}

// A save the store wrote but could not confirm durable (ErrUnconfirmed)
// is followed by one that says what became of the work it was for — a
// call saved running and then not sent is saved as approved again. That
// follow-up is what a failover must keep: a new master with the first
// and without it shows more than happened. WithFollowUp marks its
// context, and a store that can sends such a save again, as it was,
// until it is confirmed (or for as long as the store allows), rather
// than return ErrUnconfirmed at the first wait that falls short.

type followUpKey struct{}

// WithFollowUp returns a context whose saves follow an unconfirmed one
// (see above).
func WithFollowUp(ctx context.Context) context.Context {
	return context.WithValue(ctx, followUpKey{}, true)
}

// IsFollowUp reports whether ctx's saves follow an unconfirmed one.
func IsFollowUp(ctx context.Context) bool {
	v, _ := ctx.Value(followUpKey{}).(bool)
	return v
}
