package routes

import "github.com/shoal-run/shoal/internal/route"

// A node that leaves the cluster's live set (its heartbeat lapsed: it
// stopped, lost power or its network) is served no more at once, before
// the leader moves its replicas: SetLive takes its endpoints out of every
// route this node's proxy has, and cuts the requests the proxy has in
// flight to them, which would otherwise wait for an answer that does not
// come. The proxy sends such a request again to another endpoint when
// that is safe, else answers 502 (see proxy's forward). The endpoints come
// back when the node is live again.

// SetLive takes the names of the live nodes (cluster.Live). Until it is
// first called every node counts as live.
func (r *Router) SetLive(nodes []string) {
	live := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		live[n] = true
	}
	r.mu.Lock()
	old := r.live
	r.live = live
	changed := map[string]bool{}
	var cut []string
	for _, rt := range r.proxyRoutesLocked() {
		for _, e := range rt.Endpoints {
			if e.Node == "" || e.Node == r.o.Node || live[e.Node] == (old == nil || old[e.Node]) {
				continue
			}
			changed[e.Node] = true
			if !live[e.Node] {
				cut = append(cut, e.ID)
			}
		}
	}
	for n := range changed {
		if live[n] {
			r.log.Info("routes: a node is live again; its endpoints are routed", "node", n)
		} else {
			r.log.Warn("routes: a node left the live set; its endpoints are routed no more and their requests cut", "node", n)
		}
	}
	r.routeAgainLocked(changed)
	r.mu.Unlock()
	// The routes leave the endpoints before their requests are cut, so a
	// request sent again goes to another endpoint.
	for _, id := range cut {
		r.o.Local.Cut(id)
	}
}

// proxyRoutesLocked returns the routes this node's proxy has: those it set as
// leader, else those read from the store. r.mu is held.
func (r *Router) proxyRoutesLocked() []route.Route {
	var out []route.Route
	if r.leading {
		for _, rt := range r.set {
			out = append(out, rt)
		}
		return out
	}
	for _, s := range r.stored {
		out = append(out, s.rt)
	}
	return out
}

// routeAgainLocked sets again in the proxy the routes with an endpoint of
// another node in changed. r.mu is held.
func (r *Router) routeAgainLocked(changed map[string]bool) {
	if len(changed) == 0 {
		return
	}
	for _, rt := range r.proxyRoutesLocked() {
		for _, e := range rt.Endpoints {
			if changed[e.Node] && e.Node != r.o.Node {
				r.o.Local.SetRoute(r.localize(rt))
				break
			}
		}
	}
}
