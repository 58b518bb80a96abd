package routes

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// activateTimeout bounds one wake-up sent to the leader; the proxy asks
// again while its requests wait.
const activateTimeout = 5 * time.Second

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
// and sends at most one wake-up of an app to the leader at a time.
type Activator struct {
	Local   Waker
	Leader  LeaderWaker
	Leading func() bool
	Logger  *slog.Logger

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
		ctx, cancel := context.WithTimeout(context.Background(), activateTimeout)
		defer cancel()
		if err := a.Leader.ActivateOnLeader(ctx, app); err != nil && a.Logger != nil {
			a.Logger.Warn("routes: wake an app through the leader", "app", app, "err", err)
		}
	}()
}
