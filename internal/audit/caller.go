package audit

import "context"

// Caller names who asked for an operator action (the console's
// force-release, an admin's close of an identity), for the audit trail.
type Caller struct {
	Identity, Remote string
}

type callerKey struct{}

// WithCaller returns ctx naming c as the caller of an operator action
// carried out under it.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf is the caller ctx names (WithCaller), or the zero Caller.
func CallerOf(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}
