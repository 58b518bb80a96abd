package serving

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/route"
)

// The controller's lock discipline: ctl.mu guards the app's state and is
// held only while that state is read and decided on. Nothing that calls
// out of the controller (the router, a node, a long store write) runs
// under it: a holder records what is to be done (publish, thaw, queue an
// action) and unlock does it once ctl.mu is released, in this order:
//
//  1. thaws (actThaw), each a node call, whose replicas then go ready
//     under ctl.mu;
//  2. the app's route, made under ctl.mu and numbered, so that of two
//     routes published at once the newer always wins (routePub);
//  3. the actions (action, data: what and on which replica), goroutines
//     started and calls made only now, so that a replica being drained
//     or frozen is out of the published route before anything waits for
//     its last request.
//
// A decision that takes replicas out of service (hold) is stored before
// its route goes out: while the store does not hold it yet, every route
// made is held with its actions, in order, and the writer publishes them
// and does their actions once it has written (release). Actions that come
// with no route are done at once.

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
func (ctl *appCtl) publish() { ctl.routeDirty = true }

// hold comes with a decision that takes replicas out of service (a
// traffic switch, a replica's draining mark): the routes made from now on,
// and the actions that follow them, wait until the store holds the
// records changed so far. A daemon killed after such a route went out
// then finds why in the store, and never routes those replicas again.
// mu is held.
func (ctl *appCtl) hold() {
	ctl.holds++
	poke(ctl.dirty)
}

// queue has action a done once mu is released and the route published.
// mu is held.
func (ctl *appCtl) queue(a action) { ctl.acts = append(ctl.acts, a) }

// unlock releases ctl.mu and does what its holder left to do. Every
// holder of ctl.mu releases it through unlock.
func (ctl *appCtl) unlock() {
	for thaws := ctl.takeThaws(); len(thaws) > 0; thaws = ctl.takeThaws() {
		ctl.mu.Unlock()
		errs := make([]error, len(thaws))
		took := make([]time.Duration, len(thaws))
		for i, a := range thaws {
			began := ctl.m.clock.Now()
			errs[i] = ctl.node.Thaw(ctl.ctx(), a.r.rec.ID)
			took[i] = ctl.m.clock.Since(began)
		}
		ctl.mu.Lock()
		for i, a := range thaws {
			ctl.thawed(a.r, errs[i], took[i])
		}
	}
	var rt route.Route
	var seq uint64
	if ctl.routeSoon && !ctl.routeDirty && ctl.holds <= ctl.stored {
		// Only the count of starting replicas changed: no replica left
		// the route, so the actions (a start) need not wait for it.
		ctl.routeSoon = false
		srt, sseq := ctl.route(), ctl.pub.next()
		ctl.lead.wg.Add(1)
		go func() {
			defer ctl.lead.wg.Done()
			ctl.pub.publish(ctl.m.o.Router, sseq, srt)
		}()
	}
	if ctl.routeDirty || ctl.routeSoon {
		ctl.routeDirty, ctl.routeSoon = false, false
		rt, seq = ctl.route(), ctl.pub.next()
	}
	acts := ctl.acts
	ctl.acts = nil
	if seq > 0 && ctl.holds > ctl.stored {
		// The store does not hold yet why replicas left the route.
		ctl.held = append(ctl.held, heldRoute{upto: ctl.holds, seq: seq, rt: rt, acts: acts})
		ctl.mu.Unlock()
		return
	}
	ctl.mu.Unlock()
	ctl.out(heldRoute{seq: seq, rt: rt, acts: acts})
}

// out publishes h's route and does its actions. ctl.mu is not held.
func (ctl *appCtl) out(h heldRoute) {
	if h.seq > 0 {
		ctl.pub.publish(ctl.m.o.Router, h.seq, h.rt)
	}
	for _, a := range h.acts {
		ctl.do(a)
	}
}

// actKind is what an action does.
type actKind int

const (
	actThaw       actKind = iota // thaw the replica, in line, before the route (unlock)
	actBoot                      // start the replica's container and wait for it to be ready (boot)
	actFreeze                    // let its last requests finish, then freeze it (freezeNow)
	actDrainHalt                 // let its in-flight requests finish, then stop it (drainAndHalt)
	actHalt                      // stop it (halt)
	actRemove                    // remove a dead replica once the app's starts are over
	actSetCPU                    // change its CPU quota (setCPU), in line
	actCheckpoint                // dump it to disk, then stop it (checkpointThenHalt)
	actPremake                   // make the app's premade replica (makePremade)
	actUnpremake                 // remove a premade replica (dropPremade)
)

// action is a call that a holder of ctl.mu leaves for unlock to make
// once ctl.mu is released and the route is out (see above): data, so
// that what a decision left to do can be read. Thaws are made first, in
// line, before the route goes out; actSetCPU in line after it; every
// other kind runs in a goroutine of its own.
type action struct {
	kind  actKind
	r     *replica
	why   string
	grace time.Duration // actFreeze, actDrainHalt: how long requests in flight may take
	stop  time.Duration // actDrainHalt, actHalt, actCheckpoint: stop_timeout, SIGKILL after it
	cpu   float64       // actSetCPU: the new quota
	boot  *bootSpec     // actBoot
	pm    *premadeBox   // actPremake, actUnpremake
}

// bootSpec is what a replica's container starts with.
type bootSpec struct {
	cfg    manifest.Config
	digest string
	env    []string
	// checkpointable: the node may checkpoint it; restore, when set, is
	// the checkpoint it is restored from instead of booted.
	checkpointable bool
	restore        *savedCheckpoint
	// premade, when set, is what the node made of a premade replica: its
	// boot only has the waiting pid 1 exec the entrypoint.
	premade *Started
}

// do makes action a. ctl.mu is not held.
func (ctl *appCtl) do(a action) {
	r := a.r
	switch a.kind {
	case actBoot:
		go func() {
			defer ctl.lead.wg.Done()
			defer ctl.boots.finish()
			ctl.boot(r, a.boot)
		}()
	case actPremake:
		go func() {
			defer ctl.lead.wg.Done()
			ctl.makePremade(a.pm)
		}()
	case actUnpremake:
		go ctl.dropPremade(a.pm)
	case actFreeze:
		go ctl.freezeNow(r, a.why, a.grace)
	case actDrainHalt:
		go ctl.drainAndHalt(r, a.grace, a.stop)
	case actHalt:
		go ctl.halt(r, a.stop)
	case actCheckpoint:
		go ctl.checkpointThenHalt(r, a.stop)
	case actRemove:
		go func() {
			ctl.boots.wait(ctl.m.clock, bootWait, ctl.stop)
			ctl.remove(r, false)
		}()
	case actSetCPU:
		ctl.setCPU(r, a.cpu, a.why)
	}
}

// takeThaws takes the thaws out of the actions queued, the others left
// in order. ctl.mu is held.
func (ctl *appCtl) takeThaws() []action {
	var thaws []action
	rest := ctl.acts[:0]
	for _, a := range ctl.acts {
		if a.kind == actThaw {
			thaws = append(thaws, a)
		} else {
			rest = append(rest, a)
		}
	}
	ctl.acts = rest
	return thaws
}

// release publishes the held routes whose decisions the store now holds,
// those up to upto, and does their actions, in order. Neither ctl.mu nor
// ctl.recMu is held.
func (ctl *appCtl) release(upto uint64) {
	ctl.mu.Lock()
	ctl.stored = max(ctl.stored, upto)
	n := 0
	for n < len(ctl.held) && ctl.held[n].upto <= ctl.stored {
		n++
	}
	out := ctl.held[:n:n]
	ctl.held = append([]heldRoute(nil), ctl.held[n:]...)
	ctl.unlock()
	for _, h := range out {
		ctl.out(h)
	}
}

// thawed finishes the thaw of r, which took d and failed with err or not.
// ctl.mu is held.
func (ctl *appCtl) thawed(r *replica, err error, took time.Duration) {
	if r.state != StateThawing {
		return // its app is being deleted, or it died: not thawed
	}
	if err != nil {
		ctl.m.log.Warn("serving: thaw failed; stopping the replica", "replica", r.rec.ID, "err", err)
		ctl.stopReplica(r, fmt.Sprintf("thaw failed: %v", err))
		return
	}
	r.lastActive = ctl.m.clock.Now()
	r.rec.FrozenAt, r.rec.Memory = nil, 0
	ctl.move(r, mvThawed, "needed to serve", map[string]float64{"seconds": took.Seconds()})
	ctl.publish()
	ctl.m.metrics.coldStart(ctl.name, "thaw", took)
}

// routePub publishes an app's routes in the order they were made: a
// route older than one published already is dropped, so a slow publisher
// never puts back a replica that has left the route since. A publish
// returns once a route at least as new as its own is out.
type routePub struct {
	mu   sync.Mutex // held while the router is told
	seq  uint64     // the last route numbered (under ctl.mu)
	done uint64     // the last route published
}

// next numbers a new route. ctl.mu is held.
func (p *routePub) next() uint64 {
	p.seq++
	return p.seq
}

func (p *routePub) publish(r Router, seq uint64, rt route.Route) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq <= p.done {
		return
	}
	r.SetRoute(rt)
	p.done = seq
}

// remove takes the app's route away for good: no route is published
// after it.
func (p *routePub) remove(r Router, app string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.RemoveRoute(app)
	p.done = math.MaxUint64
}
