package routes

import (
	"context"
	"encoding/json"
	"math"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// record is the value of routes/<app>: the route and the leader that
// wrote it. The key's revision numbers it.
type record struct {
	Route  route.Route `json:"route"`
	Leader string      `json:"leader"`
}

// dropKeep is how long the change that dropped an endpoint is kept for a
// WaitIdle that has not come yet.
const dropKeep = 10 * time.Minute

// retryAfter is how long a write the store refused waits before it is
// tried again.
const retryAfter = time.Second

// writes are the route changes the leader has yet to write to the store
// and what became of the written ones. Each app's changes are numbered;
// only the newest unwritten one of an app is written (the others would be
// overwritten at once).
type writes struct {
	mu      sync.Mutex
	made    map[string]uint64       // by app: the last change's number
	pending map[string]pendingWrite // by app: the newest change not written
	done    map[string]doneWrite    // by app: the newest change written
	drops   map[string]drop         // by endpoint: the change that dropped it
	kick    chan struct{}
	changed chan struct{} // closed and replaced when done changes
}

type pendingWrite struct {
	rt  *route.Route // nil: the app's route is removed
	seq uint64
}

// doneWrite is a change written at store revision rev; 0 when it was not
// (this node no longer led), and removed when it removed the app (the
// revision of a delete is not known: a node has applied it once it no
// longer routes the endpoint).
type doneWrite struct {
	seq uint64
	rev int64
}

// removed is the revision that stands for a removal, or a drop whose
// revision is not known here: a node waits until it routes the endpoint
// no more.
const removed = math.MaxInt64

type drop struct {
	app string
	seq uint64
	at  time.Time
}

func (w *writes) init() {
	w.made, w.pending, w.done = map[string]uint64{}, map[string]pendingWrite{}, map[string]doneWrite{}
	w.drops, w.kick, w.changed = map[string]drop{}, make(chan struct{}, 1), make(chan struct{})
}

// queue numbers a change of app's route (rt nil: removed) that dropped the
// endpoints ids.
func (w *writes) queue(app string, rt *route.Route, ids []string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.made[app]++
	seq := w.made[app]
	w.pending[app] = pendingWrite{rt: rt, seq: seq}
	for id, d := range w.drops {
		if now.Sub(d.at) > dropKeep {
			delete(w.drops, id)
		}
	}
	for _, id := range ids {
		w.drops[id] = drop{app: app, seq: seq, at: now}
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// take returns the pending changes and forgets them.
func (w *writes) take() map[string]pendingWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = map[string]pendingWrite{}
	return p
}

// finish records app's change seq as written at rev (0: not written).
func (w *writes) finish(app string, seq uint64, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done[app].seq < seq {
		w.done[app] = doneWrite{seq: seq, rev: rev}
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// retry puts back a change the store refused, unless a newer one came.
func (w *writes) retry(app string, p pendingWrite) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, newer := w.pending[app]; !newer {
		w.pending[app] = p
	}
}

// droppedAt returns the store revision of the change that dropped the
// endpoint, once it is written; false when this node dropped no such
// endpoint, the change was not written, or ctx ended first.
func (w *writes) droppedAt(ctx context.Context, id string) (int64, bool) {
	w.mu.Lock()
	d, ok := w.drops[id]
	w.mu.Unlock()
	if !ok {
		return 0, false
	}
	for {
		w.mu.Lock()
		done, ch := w.done[d.app], w.changed
		w.mu.Unlock()
		if done.seq >= d.seq {
			return done.rev, done.rev > 0
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// writer writes the queued route changes while this node leads, until ctx
// ends. A change made while leading but written after the term ended is
// refused by the store (fenced), and dropped.
func (r *Router) writer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.w.kick:
		}
		failed := false
		for app, p := range r.w.take() {
			rev, err := r.write(ctx, app, p.rt)
			switch {
			case err == nil:
				r.w.finish(app, p.seq, rev)
			case errdefs.IsConflict(err) || ctx.Err() != nil:
				r.log.Info("routes: a route change was not written: this node leads no more", "app", app, "err", err)
				r.w.finish(app, p.seq, 0)
			default:
				r.log.Warn("routes: write a route; trying again", "app", app, "err", err)
				r.w.retry(app, p)
				failed = true
			}
		}
		if failed {
			t := r.clk.NewTimer(retryAfter)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			select {
			case r.w.kick <- struct{}{}:
			default:
			}
		}
	}
}

// write writes app's route (nil: its removal) through the leader's term.
func (r *Router) write(ctx context.Context, app string, rt *route.Route) (int64, error) {
	r.mu.Lock()
	term := r.term
	r.mu.Unlock()
	if term == nil {
		return 0, errdefs.ErrConflict
	}
	if rt == nil {
		if err := term.Delete(ctx, store.RouteKey(app)); err != nil {
			return 0, err
		}
		return removed, nil
	}
	b, err := json.Marshal(record{Route: *rt, Leader: r.o.Node})
	if err != nil {
		return 0, err
	}
	return term.Put(ctx, store.RouteKey(app), b)
}
