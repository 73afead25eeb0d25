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
