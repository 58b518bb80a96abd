package serving

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/route"
)

// appState is one app's state on this node, under mu, and what a holder
// of mu leaves to do once it is released (see unlock). Its methods read
// and change it; none calls out.
type appState struct {
	name     string
	cluster  bool // a node of a cluster runs it: endpoints name their node
	mu       sync.Mutex
	rec      appRecord
	gen      uint64 // counts the changes of rec (recChanged)
	reps     map[string]*replica
	revs     map[int]revisionRecord // the app's revisions, read at start or made by a deploy
	unsaved  map[string]bool        // replica ids whose record must be written (or deleted)
	appDirty bool                   // the app record must be written
	dirty    chan struct{}          // records to write
	deleting bool

	routeDirty bool       // the route must be published
	thaws      []*replica // replicas to thaw
	remains    []*replica // dead replicas whose container and address wait for clearRemains
	acts       []action   // calls to make, goroutines to start

	// Routes wait for the store after a decision that took replicas out
	// of service (see hold): holds counts those decisions, stored how many
	// of them the store holds, and held keeps the routes made meanwhile,
	// with their actions, in order, for the writer to publish and do once
	// it has written.
	holds  uint64
	stored uint64
	held   []heldRoute
}

// heldRoute is a route, numbered, and the actions that follow it, made
// while the store did not yet hold decision upto (see hold).
type heldRoute struct {
	upto uint64
	seq  uint64 // 0 (unlock only): no route
	rt   route.Route
	acts []action
}

// publish has the app's route published once mu is released.
// mu is held.
func (st *appState) publish() { st.routeDirty = true }

// hold comes with a decision that takes replicas out of service (a
// traffic switch, a replica's draining mark): the routes made from now on,
// and the actions that follow them, wait until the store holds the
// records changed so far. A daemon killed after such a route went out
// then finds why in the store, and never routes those replicas again.
// mu is held.
func (st *appState) hold() {
	st.holds++
	poke(st.dirty)
}

// route is the app's route: its ready replicas. mu is held.
func (st *appState) route() route.Route {
	cfg := st.rec.Config
	rt := route.Route{App: st.name, MaxBodyBytes: cfg.Resources.MaxBodyBytes(), QueueLimit: cfg.Scale.Queue,
		QueueTimeout: cfg.Scale.QueueTimeout.Duration, WebSocketTimeout: cfg.Scale.WebSocketTimeout.Duration}
	if st.deleting {
		rt.Unavailable = "app " + st.name + " is being deleted"
	}
	// Only the revisions that take traffic are routed.
	weights := st.weights()
	rt.Weights, rt.Sticky = weights, st.rec.Sticky
	if st.cluster {
		// A proxy sends to another node's replicas once its own node's
		// are at the concurrency the app scales to.
		rt.Capacity = int(math.Ceil(cfg.Scale.TargetConcurrency))
	}
	ids := make([]string, 0, len(st.reps))
	for id, r := range st.reps {
		if weights[r.rec.Revision] == 0 {
			continue
		}
		if r.state == StateReady && !r.closed {
			ids = append(ids, id)
		} else if r.rec.State == StateFrozen {
			rt.Frozen++
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := st.reps[id]
		ep := route.Endpoint{ID: id, Addr: r.rec.Addr, Revision: r.rec.Revision}
		if st.cluster {
			ep.Node = r.rec.Node
		}
		rt.Endpoints = append(rt.Endpoints, ep)
	}
	return rt
}

// markDirty queues replica id's record (or its deletion) for the writer.
func (st *appState) markDirty(id string) {
	st.unsaved[id] = true
	poke(st.dirty)
}

// recChanged counts a change of the app record: one who read it, let mu
// go and wants to put a record made from it (a deploy) knows by gen
// whether it changed meanwhile. mu is held.
func (st *appState) recChanged() { st.gen++ }

// takeRecord returns the app record, changed, as JSON, for a write the
// caller makes itself rather than the writer. mu is held.
func (st *appState) takeRecord() ([]byte, error) {
	st.recChanged()
	st.appDirty = false
	val, err := json.Marshal(st.rec)
	if err != nil {
		return nil, fmt.Errorf("app %q: %w", st.name, err)
	}
	return val, nil
}

// weights maps each revision that takes traffic to its percent: the app's
// traffic assignment, or all of it to the current revision. mu is held.
func (st *appState) weights() map[int]int { return weightsOf(st.rec.Traffic, st.rec.Revision) }

// revision returns revision n of the app. Every revision is read at start
// or made by a deploy; one that is missing is not found. mu is held.
func (st *appState) revision(n int) (revisionRecord, error) {
	if rv, ok := st.revs[n]; ok {
		return rv, nil
	}
	return revisionRecord{}, fmt.Errorf("app %q: revision %d: %w", st.name, n, errdefs.ErrNotFound)
}

// configOf is the config and image digest of revision n: replicas of every
// revision run with their own. mu is held.
func (st *appState) configOf(n int) (manifest.Config, string, error) {
	if n == st.rec.Revision {
		return st.rec.Config, st.rec.Digest, nil
	}
	rv, err := st.revision(n)
	if err != nil {
		return manifest.Config{}, "", err
	}
	return rv.Config, rv.Digest, nil
}

// saveApp queues the app record for the writer. mu is held.
func (st *appState) saveApp() {
	st.recChanged()
	st.appDirty = true
	poke(st.dirty)
}

// activeServing counts the replicas of the revisions that take traffic,
// ready or starting. mu is held.
func (st *appState) activeServing() int {
	w := st.weights()
	n := 0
	for _, r := range st.reps {
		if w[r.rec.Revision] == 0 {
			continue
		}
		switch r.state {
		case StateReady, StateStarting, StatePending:
			n++
		}
	}
	return n
}

// inRoute counts the ready replicas in the route: of a revision that takes
// traffic and passing their health check. mu is held.
func (st *appState) inRoute() int {
	w := st.weights()
	n := 0
	for _, r := range st.reps {
		if r.state == StateReady && !r.closed && w[r.rec.Revision] > 0 {
			n++
		}
	}
	return n
}

// serving counts the replicas that serve or are about to: starting and
// ready ones, not those freezing, halted or on their way out. ctl.mu is
// held.
func (st *appState) serving() int {
	n := 0
	for _, r := range st.reps {
		switch r.state {
		case StatePending, StateStarting, StateReady:
			n++
		}
	}
	return n
}

// halted counts the replicas halted at their own request that still run.
// mu is held.
func (st *appState) halted() int {
	n := 0
	for _, r := range st.reps {
		if r.state == StateHalted {
			n++
		}
	}
	return n
}

// queue has action a done once mu is released and the route published.
// mu is held.
func (st *appState) queue(a action) { st.acts = append(st.acts, a) }
