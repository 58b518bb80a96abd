package network

import (
	"context"
	"time"
)

// cniAtOnce bounds the CNI plugin runs at once. They serialise on the
// host's locks anyway (host-local's file lock, the xtables lock, the
// bridge's), so more at once only adds contention: a burst of starts
// waits its turn here, where no timer runs, instead of inside a plugin
// that a deadline then kills half-way.
const cniAtOnce = 4

// opLimitKey carries, in a context, how long one CNI operation may run
// once it has its turn (withOpLimit).
type opLimitKey struct{}

// withOpLimit bounds each CNI operation made under ctx to d, counted from
// when the operation gets its turn at the gate, not from now.
func withOpLimit(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, opLimitKey{}, d)
}

// cniGate lets cniAtOnce CNI operations run at once.
type cniGate chan struct{}

func newCNIGate() cniGate { return make(cniGate, cniAtOnce) }

// enter waits for a turn (or ctx's end) and returns the context the
// operation runs under, bounded by ctx's operation limit from now on,
// and the function that ends the turn.
func (g cniGate) enter(ctx context.Context) (context.Context, func(), error) {
	select {
	case g <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	leave := func() { <-g }
	if d, ok := ctx.Value(opLimitKey{}).(time.Duration); ok && d > 0 {
		octx, cancel := context.WithTimeout(ctx, d)
		return octx, func() { cancel(); leave() }, nil
	}
	return ctx, leave, nil
}
