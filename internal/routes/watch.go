package routes

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/store"
)

// follow keeps the keys under prefix in step until ctx ends: it starts a
// watch, lists the keys (replace), applies each change the watch sees, and
// does it all again when the watch ends early.
func (r *Router) follow(ctx context.Context, prefix string, replace func([]store.KV), apply func(store.Event)) {
	for ctx.Err() == nil {
		// Watch first, then list: no change falls between the two.
		ch, err := r.o.Store.Watch(ctx, prefix)
		if err == nil {
			var kvs []store.KV
			if kvs, err = r.o.Store.List(ctx, prefix); err == nil {
				replace(kvs)
				for ev := range ch {
					apply(ev)
				}
				continue
			}
		}
		if ctx.Err() == nil {
			r.log.Warn("routes: follow the store", "prefix", prefix, "err", err)
		}
		t := r.clk.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
}

// replaceRoutes takes the listed routes as the whole table: apps not in it
// are gone.
func (r *Router) replaceRoutes(kvs []store.KV) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]bool, len(kvs))
	var top int64
	for _, kv := range kvs {
		app := strings.TrimPrefix(kv.Key, store.RoutesPrefix)
		seen[app] = true
		r.putLocked(app, kv)
		top = max(top, kv.ModRev)
	}
	for app := range r.stored {
		if !seen[app] {
			r.removeLocked(app)
		}
	}
	r.appliedLocked(top)
	select {
	case <-r.synced:
	default:
		close(r.synced)
	}
}

// applyRoute applies one change of an app's route. A change older than
// what is known of the app (seen again after a new list) is skipped.
func (r *Router) applyRoute(ev store.Event) {
	app := strings.TrimPrefix(ev.KV.Key, store.RoutesPrefix)
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.stored[app]; !ok || ev.KV.ModRev > s.rev {
		if ev.Type == store.EventPut {
			r.putLocked(app, ev.KV)
		} else if ok {
			r.removeLocked(app)
		}
	}
	r.appliedLocked(ev.KV.ModRev)
}

// putLocked keeps a stored route and, while this node follows, sets it in
// its proxy. r.mu is held.
func (r *Router) putLocked(app string, kv store.KV) {
	if s, ok := r.stored[app]; ok && s.rev >= kv.ModRev {
		return
	}
	var rec record
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		r.log.Error("routes: unreadable route; skipped", "key", kv.Key, "err", err)
		return
	}
	rec.Route.App = app
	r.stored[app] = storedRoute{rt: rec.Route, rev: kv.ModRev}
	if !r.leading {
		r.o.Local.SetRoute(r.localize(rec.Route))
	}
}

// removeLocked forgets a stored route and, while this node follows,
// removes the app from its proxy. r.mu is held.
func (r *Router) removeLocked(app string) {
	delete(r.stored, app)
	if !r.leading {
		r.o.Local.RemoveRoute(app)
	}
}

// appliedLocked notes that the route changes up to rev are applied and
// wakes those waiting for one. r.mu is held.
func (r *Router) appliedLocked(rev int64) {
	if rev > r.rev {
		r.rev = rev
	}
	close(r.applied)
	r.applied = make(chan struct{})
}

// WaitApplied returns once this node has applied the route changes up to
// store revision seq, or routes the endpoint no more, and then its proxy
// has no request in flight on it; or with ctx's error. It is the node's
// side of a leader's WaitIdle.
func (r *Router) WaitApplied(ctx context.Context, endpointID string, seq int64) error {
	for {
		r.mu.Lock()
		done := r.rev >= seq || !r.routesLocked(endpointID)
		ch := r.applied
		r.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return r.o.Local.WaitIdle(ctx, endpointID)
}

// routesLocked tells whether a route this node's proxy has holds the
// endpoint. r.mu is held.
func (r *Router) routesLocked(endpointID string) bool {
	if r.leading {
		for _, rt := range r.set {
			for _, e := range rt.Endpoints {
				if e.ID == endpointID {
					return true
				}
			}
		}
		return false
	}
	for _, s := range r.stored {
		for _, e := range s.rt.Endpoints {
			if e.ID == endpointID {
				return true
			}
		}
	}
	return false
}

// replaceNodes takes the listed node records' proxy addresses.
func (r *Router) replaceNodes(kvs []store.KV) {
	addrs := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		var rec cluster.Record
		if json.Unmarshal(kv.Value, &rec) == nil && rec.ProxyAddr != "" {
			addrs[strings.TrimPrefix(kv.Key, store.NodesPrefix)] = rec.ProxyAddr
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setAddrsLocked(addrs)
}

// applyNode applies a change of one node's record.
func (r *Router) applyNode(ev store.Event) {
	name := strings.TrimPrefix(ev.KV.Key, store.NodesPrefix)
	var rec cluster.Record
	if ev.Type == store.EventPut {
		json.Unmarshal(ev.KV.Value, &rec)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	addrs := maps.Clone(r.addrs)
	if rec.ProxyAddr == "" {
		delete(addrs, name)
	} else {
		addrs[name] = rec.ProxyAddr
	}
	r.setAddrsLocked(addrs)
}

// setAddrsLocked takes new proxy addresses of the nodes and routes again
// the apps with an endpoint on a node whose address changed. r.mu is held.
func (r *Router) setAddrsLocked(addrs map[string]string) {
	changed := map[string]bool{}
	for n, a := range addrs {
		if r.addrs[n] != a {
			changed[n] = true
		}
	}
	for n := range r.addrs {
		if _, ok := addrs[n]; !ok {
			changed[n] = true
		}
	}
	r.addrs = addrs
	r.routeAgainLocked(changed)
}
