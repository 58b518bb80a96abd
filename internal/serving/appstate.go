package serving

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/route"
)

// failFastAfter: an app whose next start is this far off, with no
// replica ready, starting or frozen, has its requests answered 503 at
// once (route.Route.Failing) rather than held for a start.
const failFastAfter = time.Second

// route is the app's route: its ready replicas. mu is held.
func (ctl *appCtl) route() route.Route {
	cfg := ctl.rec.Config
	rt := route.Route{App: ctl.name, MaxBodyBytes: cfg.Resources.MaxBodyBytes(), QueueLimit: cfg.Scale.Queue,
		QueueTimeout: cfg.Scale.QueueTimeout.Duration, WebSocketTimeout: cfg.Scale.WebSocketTimeout.Duration, MaxConns: cfg.Scale.MaxConnections,
		Domains: cfg.Domains, KeepHTTP: !cfg.HTTPS.Redirect, NoHSTS: !cfg.HTTPS.HSTS}
	if cfg.TCP() {
		rt.TCPPort = cfg.Listen
	}
	if ctl.deleting {
		rt.Unavailable = "app " + ctl.name + " is being deleted"
	}
	// Only the revisions that take traffic are routed.
	weights := ctl.weights()
	rt.Weights, rt.Sticky = weights, ctl.rec.Sticky
	// A stateful app's ordinals all serve, whatever their revision (a
	// rolling upgrade has both).
	every := cfg.Stateful.Enabled()
	if every {
		rt.Weights = nil
	}
	if ctl.cluster {
		// A proxy sends to another node's replicas once its own node's
		// are at the concurrency the app scales to.
		rt.Capacity = int(math.Ceil(cfg.Scale.TargetConcurrency))
	}
	ids := make([]string, 0, len(ctl.reps))
	booting := 0
	for id, r := range ctl.reps {
		if weights[r.rec.Revision] == 0 && !every {
			continue
		}
		if r.state == StateReady && !r.closed {
			ids = append(ids, id)
		} else if r.rec.State == StateFrozen {
			rt.Frozen++
		} else if r.state.booting() {
			booting++
		}
	}
	if ctl.failures == 0 {
		// A start holds requests past their queue timeout only while the
		// app is not failing: a start tried again after failed replicas is
		// no sign that one will be ready.
		rt.Starting = booting
	}
	if len(ids) == 0 && booting == 0 && rt.Frozen == 0 && ctl.lastErr != "" {
		// Failing: no replica can be ready before the back-off ends.
		if now := ctl.m.clock.Now(); ctl.backoff.Sub(now) >= failFastAfter {
			rt.Failing, rt.RetryAt = ctl.lastErr, ctl.backoff
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := ctl.reps[id]
		ep := route.Endpoint{ID: id, Addr: r.rec.Addr, Revision: r.rec.Revision}
		if c, _, err := ctl.configOf(r.rec.Revision); err == nil && c.H2C() {
			ep.Protocol = route.ProtocolH2C
		}
		if ctl.cluster {
			ep.Node = r.rec.Node
		}
		rt.Endpoints = append(rt.Endpoints, ep)
	}
	return rt
}

// markDirty queues replica id's record (or its deletion) for the writer.
func (ctl *appCtl) markDirty(id string) {
	ctl.unsaved[id] = true
	poke(ctl.dirty)
}

// recChanged counts a change of the app record: one who read it, let mu
// go and wants to put a record made from it (a deploy) knows by gen
// whether it changed meanwhile. mu is held.
func (ctl *appCtl) recChanged() { ctl.gen++ }

// takeRecord returns the app record, changed, as JSON, for a write the
// caller makes itself rather than the writer. mu is held.
func (ctl *appCtl) takeRecord() ([]byte, error) {
	ctl.recChanged()
	ctl.appDirty = false
	val, err := json.Marshal(ctl.rec)
	if err != nil {
		return nil, fmt.Errorf("app %q: %w", ctl.name, err)
	}
	return val, nil
}

// weights maps each revision that takes traffic to its percent: the app's
// traffic assignment, or all of it to the current revision. mu is held.
func (ctl *appCtl) weights() map[int]int { return weightsOf(ctl.rec.Traffic, ctl.rec.Revision) }

// revision returns revision n of the app. Every revision is read at start
// or made by a deploy; one that is missing is not found. mu is held.
func (ctl *appCtl) revision(n int) (revisionRecord, error) {
	if rv, ok := ctl.revs[n]; ok {
		return rv, nil
	}
	return revisionRecord{}, fmt.Errorf("app %q: revision %d: %w", ctl.name, n, errdefs.ErrNotFound)
}

// configOf is the config and image digest of revision n: replicas of every
// revision run with their own. mu is held.
func (ctl *appCtl) configOf(n int) (manifest.Config, string, error) {
	if n == ctl.rec.Revision {
		return ctl.rec.Config, ctl.rec.Digest, nil
	}
	rv, err := ctl.revision(n)
	if err != nil {
		return manifest.Config{}, "", err
	}
	return rv.Config, rv.Digest, nil
}

// configOrCurrent is the config of revision n, or the current one's
// when n cannot be read. mu is held.
func (ctl *appCtl) configOrCurrent(n int) manifest.Config {
	if c, _, err := ctl.configOf(n); err == nil {
		return c
	}
	return ctl.rec.Config
}

// saveApp queues the app record for the writer. mu is held.
func (ctl *appCtl) saveApp() {
	ctl.recChanged()
	ctl.appDirty = true
	poke(ctl.dirty)
}

// inRoute counts the ready replicas in the route: of a revision that takes
// traffic and passing their health check. mu is held.
func (ctl *appCtl) inRoute() int {
	w := ctl.weights()
	n := 0
	for _, r := range ctl.reps {
		if r.state == StateReady && !r.closed && (w[r.rec.Revision] > 0 || ctl.rec.Config.Stateful.Enabled()) {
			n++
		}
	}
	return n
}

// serving counts the replicas that serve or are about to: starting and
// ready ones, not those freezing, halted or on their way out. ctl.mu is
// held.
func (ctl *appCtl) serving() int {
	n := 0
	for _, r := range ctl.reps {
		switch r.state {
		case StatePending, StateStarting, StateReady:
			n++
		}
	}
	return n
}
