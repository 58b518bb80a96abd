package routes

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// activateTimeout bounds one wake-up sent to the leader. One the leader
// did not take (no leader during an election, its agent not answering)
// is sent again, after activateRetry and then twice as long each time up
// to activateRetryMax, for up to activateKeep: the proxy had its 202 and
// does not ask again, and the request waits for this one.
const (
	activateTimeout  = 5 * time.Second
	activateRetry    = 100 * time.Millisecond
	activateRetryMax = 2 * time.Second
	activateKeep     = time.Minute
)

// Waker wakes an app on this node: serving's Activate.
type Waker interface {
	Activate(app string)
}

// LeaderWaker sends a wake-up to the cluster's leader.
type LeaderWaker interface {
	ActivateOnLeader(ctx context.Context, app string) error
}

// Activator is the wake-up of this node's proxy in a cluster: the node's
// own serving wakes the app while the node leads (its controllers run
// there); otherwise the leader is asked, whose controller starts or thaws
// a replica on the node placement picks. The route that comes back
// through the store releases the held requests. Activate never blocks,
// and sends at most one wake-up of an app to the leader at a time, again
// while the leader does not take it (activateKeep).
type Activator struct {
	Local   Waker
	Leader  LeaderWaker
	Leading func() bool
	Logger  *slog.Logger
	// Clock times the retries (nil: the real one); Done, when closed,
	// ends them (the routing stops).
	Clock clock.Clock
	Done  <-chan struct{}

	mu      sync.Mutex
	sending map[string]bool
}

// Activate wakes app.
func (a *Activator) Activate(app string) {
	if a.Leading() {
		a.Local.Activate(app)
		return
	}
	a.mu.Lock()
	if a.sending == nil {
		a.sending = map[string]bool{}
	}
	if a.sending[app] {
		a.mu.Unlock()
		return
	}
	a.sending[app] = true
	a.mu.Unlock()
	go func() {
		defer func() {
			a.mu.Lock()
			delete(a.sending, app)
			a.mu.Unlock()
		}()
		a.send(app)
	}()
}

// send sends app's wake-up to the leader until it takes it, this node
// leads, activateKeep passes or Done closes.
func (a *Activator) send(app string) {
	clk := a.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	start, wait, warned := clk.Now(), activateRetry, false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), activateTimeout)
		err := a.Leader.ActivateOnLeader(ctx, app)
		cancel()
		if err == nil {
			return
		}
		if clk.Since(start) >= activateKeep {
			if a.Logger != nil {
				a.Logger.Warn("routes: a wake-up the leader did not take; given up", "app", app, "err", err)
			}
			return
		}
		if !warned && a.Logger != nil {
			a.Logger.Warn("routes: wake an app through the leader; retrying", "app", app, "err", err)
			warned = true
		}
		t := clk.NewTimer(wait)
		select {
		case <-t.C():
		case <-a.Done:
			t.Stop()
			return
		}
		wait = min(2*wait, activateRetryMax)
		if a.Leading() {
			a.Local.Activate(app)
			return
		}
	}
}
