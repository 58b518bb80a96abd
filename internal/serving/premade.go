package serving

import (
	"context"
	"errors"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/route"
)

// The pre-made tier: for an app at zero replicas of its current revision,
// the controller keeps its next replica made ahead (node.Premaker: its
// sandbox made, a pid 1 waiting), so that a cold start only has that pid 1
// exec the app's entrypoint. decide plans it (stepPremake, stepUnpremake,
// and a start that uses it); the budget across apps (Options.Premade,
// PremadeMemory) keeps those of the most recently used apps. A premade
// replica is not one of the app's replicas: it has no record and no route
// until a start takes it; it is never used for another revision or app. A
// daemon that stops removes them (Close); one that died leaves containers
// no record names, which the next removes.

// premadeBox is an app's premade replica.
type premadeBox struct {
	r      *replica // its replica, in no state yet, not among the app's
	cfg    manifest.Config
	digest string
	env    []string
	// checkpointable: made so that the node may checkpoint it, as a
	// replica booted the ordinary way would be.
	checkpointable bool
	// Under ctl.mu: made once the node's Premake returned; st is what it
	// made.
	made   bool
	st     Started
	memory int64
	done   chan struct{} // closed when Premake returned and what failed or was dropped meanwhile is removed
	// dropping: unpremake dropped it and its removal counts in
	// ctl.premadeDrops until over. Under ctl.mu.
	dropping bool
}

// premadeRetry is how long an app whose premade replica could not be made
// waits before the next is tried.
const premadeRetry = 30 * time.Second

// premadeGuess is the memory counted against the budget for a premade
// replica not measured yet.
const premadeGuess = 1 << 20

// premadeBudget ranks the apps that want a premade replica (those at zero
// replicas) by their last request or change, and admits the most recent while they
// fit the budget's count and memory.
type premadeBudget struct {
	mu   sync.Mutex
	apps map[*appCtl]*premadeUse
}

type premadeUse struct {
	used     time.Time // its last request
	want     bool
	held     bool  // it has a premade replica, or one whose removal is not over
	dropping bool  // what it holds is being removed
	memory   int64 // what its last premade replica held
}

// admitPremade tells the budget of app ctl's use and whether it wants a
// premade replica, and reports whether it may keep one (it holds one) or
// make one (it holds none). The budget admits the most recently used apps
// that fit its count and memory; one admitted without a premade replica
// may make one only while those held, by the admitted and by those whose
// replica is being removed, leave room: the budget is a bound, never
// passed while an evicted replica goes. Apps holding one that no longer
// fit are woken, to drop theirs, and those that may now make theirs.
// ctl.mu is held.
func (m *Manager) admitPremade(ctl *appCtl, used time.Time, want, held, dropping bool, memory int64) bool {
	b := &m.premades
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.apps == nil {
		b.apps = map[*appCtl]*premadeUse{}
	}
	u := b.apps[ctl]
	if u == nil {
		u = &premadeUse{}
		b.apps[ctl] = u
	}
	if used.After(u.used) {
		u.used = used
	}
	u.want, u.held, u.dropping = want, held, dropping
	if memory > 0 {
		u.memory = memory
	}
	memOf := func(x *premadeUse) int64 {
		if x.memory <= 0 {
			return premadeGuess
		}
		return x.memory
	}
	var cands []*appCtl
	heldN, heldMem := 0, int64(0)
	for c, x := range b.apps {
		if x.want {
			cands = append(cands, c)
		}
		if x.held {
			heldN++
			heldMem += memOf(x)
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := b.apps[cands[i]], b.apps[cands[j]]
		if !a.used.Equal(b.used) {
			return a.used.After(b.used)
		}
		return cands[i].name < cands[j].name
	})
	admitted := map[*appCtl]bool{}
	mayMake := map[*appCtl]bool{}
	var total int64
	fits := func(n int, mem int64) bool {
		return n <= m.o.Premade && (m.o.PremadeMemory <= 0 || mem <= m.o.PremadeMemory)
	}
	for i, c := range cands {
		x := b.apps[c]
		mem := memOf(x)
		if !fits(i+1, total+mem) {
			break
		}
		total += mem
		admitted[c] = true
		if !x.held && fits(heldN+1, heldMem+mem) {
			mayMake[c] = true
			heldN++
			heldMem += mem
		}
	}
	for c, x := range b.apps {
		if c == ctl {
			continue
		}
		if (x.held && !x.dropping && !admitted[c]) || (!x.held && mayMake[c]) {
			poke(c.changed) // to drop its premade replica, or make one
		}
	}
	if held {
		return admitted[ctl]
	}
	return mayMake[ctl]
}

// forgetPremade drops app ctl from the budget.
func (m *Manager) forgetPremade(ctl *appCtl) {
	m.premades.mu.Lock()
	delete(m.premades.apps, ctl)
	m.premades.mu.Unlock()
}

// premadeAllowed reports whether the app may keep a premade replica now:
// its node makes them, its current revision takes traffic and has no
// replica, the budget admits it, and its last one did not fail within
// premadeRetry. An app that keeps state areas has none (a replica's
// area is made at its start), nor a stateful one (its replicas are
// ordinals). ctl.mu is held.
func (ctl *appCtl) premadeAllowed(now time.Time, load route.Load) bool {
	m := ctl.m
	if m.o.Premade <= 0 || ctl.cluster {
		return false
	}
	if _, ok := ctl.node.(node.Premaker); !ok {
		return false
	}
	want := !ctl.rec.Config.State.Enabled() && !ctl.rec.Config.Stateful.Enabled() && !now.Before(ctl.premadeAfter) &&
		weightsOf(ctl.rec.Traffic, ctl.rec.Revision)[ctl.rec.Revision] > 0 &&
		(ctl.ckpt == nil || ctl.ckpt.rev != ctl.rec.Revision) // its checkpoint restores the next one
	for _, r := range ctl.reps {
		if r.rec.Revision == ctl.rec.Revision && !r.state.exiting() {
			want = false
		}
	}
	var mem int64
	if ctl.premade != nil {
		mem = ctl.premade.memory
	}
	// An app deployed, scaled or rolled back since its last request
	// counts as used then: a new app no request has reached yet is not
	// ranked below every app ever requested.
	used := load.LastRequest
	if ctl.rec.Updated.After(used) {
		used = ctl.rec.Updated
	}
	return m.admitPremade(ctl, used, want, ctl.premade != nil || ctl.premadeDrops > 0, ctl.premade == nil && ctl.premadeDrops > 0, mem)
}

// premake has the node make a replica of revision rev ahead. ctl.mu is
// held.
func (ctl *appCtl) premake(rev int, why string) {
	m := ctl.m
	cfg, digest, err := ctl.configOf(rev)
	if err != nil {
		m.log.Warn("serving: no premade replica", "app", ctl.name, "revision", rev, "err", err)
		return
	}
	now := m.clock.Now()
	r := &replica{state: stateNew, lastActive: now, soon: make(chan struct{}, 1), rec: replicaRecord{
		ID: newReplicaID(ctl.name), App: ctl.name, Revision: rev, Node: m.o.Node, StartedAt: now, CPU: cfg.Resources.CPU,
	}}
	m.self.mint(r, m.o.SelfURL)
	box := &premadeBox{r: r, cfg: cfg, digest: digest, env: r.selfEnv(m.o.SelfURL), done: make(chan struct{}),
		checkpointable: ctl.checkpointerFor(rev) != nil}
	ctl.premade = box
	m.log.Debug("serving: premaking a replica", "app", ctl.name, "replica", r.rec.ID, "revision", rev, "why", why)
	ctl.lead.wg.Add(1)
	ctl.queue(action{kind: actPremake, pm: box})
}

// makePremade has the node make box's replica; one dropped meanwhile, or
// that failed, is removed.
func (ctl *appCtl) makePremade(box *premadeBox) {
	defer close(box.done)
	m, r := ctl.m, box.r
	id := r.rec.ID
	mounts, err := ctl.mounts(r, box.cfg, box.digest)
	var pm node.Premade
	if err == nil {
		pm, err = ctl.node.(node.Premaker).Premake(ctl.ctx(), ReplicaSpec{ID: id, App: ctl.name, Revision: r.rec.Revision,
			Digest: box.digest, Config: box.cfg, Env: box.env, Mounts: mounts, Log: ctl.logs.path(id), Checkpointable: box.checkpointable})
	}
	ctl.mu.Lock()
	keep := err == nil && ctl.premade == box && !ctl.deleting && ctl.ctx().Err() == nil
	if keep {
		box.made, box.st, box.memory = true, pm.Started, pm.Memory
	} else if ctl.premade == box {
		ctl.premade = nil
	}
	if err != nil {
		ctl.premadeAfter = m.clock.Now().Add(premadeRetry)
	}
	ctl.unlock()
	if err != nil && ctl.ctx().Err() == nil {
		m.log.Warn("serving: premade replica", "app", ctl.name, "replica", id, "err", err)
	}
	if !keep {
		ctl.dropPremade(box)
	}
	ctl.notify()
}

// unpremake drops the app's premade replica. ctl.mu is held.
func (ctl *appCtl) unpremake(why string) {
	box := ctl.premade
	if box == nil {
		return
	}
	ctl.premade = nil
	box.dropping = true
	ctl.premadeDrops++
	ctl.m.log.Debug("serving: premade replica dropped", "app", ctl.name, "replica", box.r.rec.ID, "why", why)
	if box.made { // else makePremade removes it once made
		ctl.queue(action{kind: actUnpremake, pm: box})
	}
}

// dropPremade removes premade replica box: its container, address, log
// and self API token; then a round may make the next one (the round that
// dropped one of an old revision may not have seen the new one take the
// traffic yet).
func (ctl *appCtl) dropPremade(box *premadeBox) {
	defer ctl.notify()
	defer func() {
		ctl.mu.Lock()
		if box.dropping {
			box.dropping = false
			ctl.premadeDrops--
		}
		ctl.unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := box.r.rec.ID
	if err := ctl.node.Stop(ctx, id, 0); err != nil {
		ctl.m.log.Warn("serving: stop premade replica", "replica", id, "err", err)
	}
	if err := ctl.node.Remove(ctx, id); err != nil {
		ctl.m.log.Warn("serving: remove premade replica", "replica", id, "err", err)
	}
	ctl.m.self.forget(box.r.rec.TokenHash)
	for _, p := range []string{ctl.logs.path(id), ctl.logs.path(id) + ".1"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			ctl.m.log.Warn("serving: remove premade replica's log", "replica", id, "err", err)
		}
	}
}

// takePremade takes the app's premade replica, id, for a start of
// revision rev: it becomes one of the app's replicas, booted by the node
// (boot). It returns "" if there is none made of that id and revision.
// ctl.mu is held.
func (ctl *appCtl) takePremade(id string, rev int, why string) string {
	box := ctl.premade
	if box == nil || !box.made || box.r.rec.ID != id || box.r.rec.Revision != rev {
		return ""
	}
	ctl.premade = nil
	r := box.r
	now := ctl.m.clock.Now()
	r.rec.StartedAt, r.lastActive, r.booting = now, now, true
	ctl.reps[id] = r
	ctl.timeStart(r, now)
	ctl.move(r, mvStart, why+" (premade)", nil)
	ctl.lead.wg.Add(1)
	ctl.boots.add()
	st := box.st
	ctl.queue(action{kind: actBoot, r: r, boot: &bootSpec{cfg: box.cfg, digest: box.digest, env: box.env, premade: &st}})
	return id
}

// closePremade removes the app's premade replica, if any, once its making
// is over: its app is deleted, or the daemon stops.
func (ctl *appCtl) closePremade() {
	ctl.mu.Lock()
	box := ctl.premade
	ctl.premade = nil
	ctl.unlock()
	if box == nil {
		return
	}
	<-box.done
	ctl.mu.Lock()
	made := box.made
	ctl.unlock()
	if made {
		ctl.dropPremade(box)
	}
}
