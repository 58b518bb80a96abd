package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/store"
)

// adopt takes over the replicas a previous daemon on this node left: a
// running container is ready again once it answers its health check, a
// frozen one stays frozen, a draining one drains again and stops, and
// anything else is cleaned up.
func (ctl *appCtl) adopt(ctx context.Context) error {
	fs, err := ctl.readReplicas(ctx)
	if err != nil {
		return err
	}
	ctl.askNodes(ctx, fs)
	now := ctl.m.clock.Now()
	var running []adoptee
	for _, f := range fs {
		if a, ok := ctl.adoptOne(f, now); ok {
			running = append(running, a)
		}
	}
	ctl.probeAdopted(running)
	for _, a := range running {
		if a.ready {
			go ctl.healthLoop(a.r, a.exited)
			continue
		}
		ctl.awaitAdopted(a)
	}
	ctl.logs.prune(ctl.has)
	ctl.merge.retireOrphans(ctl.has)
	return nil
}

// found is a replica record a restarted controller found, what it asks
// its node about it (k) and what the node answered (ad).
type found struct {
	rec replicaRecord
	k   Known
	ad  Adopted
}

// readReplicas reads the app's revisions and the records of its replicas
// that are to be adopted.
func (ctl *appCtl) readReplicas(ctx context.Context) ([]found, error) {
	kvs, err := ctl.m.o.Store.List(ctx, store.ReplicasPrefix(ctl.name))
	if err != nil {
		return nil, fmt.Errorf("app %q: list replicas: %w", ctl.name, err)
	}
	if err := os.MkdirAll(ctl.logs.dir, 0o700); err != nil {
		return nil, fmt.Errorf("app %q: %w", ctl.name, err)
	}
	if err := ctl.loadRevisions(ctx); err != nil {
		// Replicas of the current revision still start.
		ctl.m.log.Error("serving: revisions", "app", ctl.name, "err", err)
	}
	var fs []found
	for _, kv := range kvs {
		if rec, ok := ctl.readReplica(ctx, kv); ok {
			fs = append(fs, found{rec: rec, k: ctl.known(rec)})
		}
	}
	return fs, nil
}

// readReplica reads the replica record of kv, and reports whether the
// replica is to be adopted: its record is readable and it runs on this
// node, or on a live node of the cluster. An unreadable record, or one of
// a lost node, is deleted (the controller replaces its replica).
func (ctl *appCtl) readReplica(ctx context.Context, kv store.KV) (replicaRecord, bool) {
	m := ctl.m
	var rec replicaRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.ID == "" {
		m.log.Error("serving: unreadable replica record; removed", "key", kv.Key, "err", err)
		ctl.lead.del(ctx, kv.Key)
		return rec, false
	}
	if m.disp == nil {
		return rec, rec.Node == m.o.Node
	}
	if rec.Node != "" && !m.disp.IsLive(rec.Node) {
		// Its node is lost: nothing is called there.
		ctl.lead.del(ctx, kv.Key)
		m.emit("lost", ctl.name, rec.ID, fmt.Sprintf("node %s is lost; the replica is replaced on a live node", rec.Node), nil)
		return rec, false
	}
	return rec, true
}

// known is what a node is told of replica rec to adopt it.
func (ctl *appCtl) known(rec replicaRecord) Known {
	ctl.mu.Lock()
	cfg, _, _ := ctl.configOf(rec.Revision)
	ctl.unlock()
	k := Known{ID: rec.ID, App: rec.App, CPUSet: rec.CPUSet, Port: cfg.Port}
	if ctl.m.disp != nil {
		k.Node, k.CPU, k.Memory = rec.Node, cfg.Resources.CPU, cfg.Resources.MemoryBytes()
	}
	return k
}

// askNodes asks the nodes what they know of the replicas found. A
// cluster's replicas are asked for on their nodes, a few at once: a new
// leader adopts them all before it runs the app.
func (ctl *appCtl) askNodes(ctx context.Context, fs []found) {
	par := 1
	if ctl.m.disp != nil {
		par = adoptAtOnce
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range fs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ad, err := ctl.node.Adopt(ctx, fs[i].k)
			if err != nil {
				// Not known to run: replaced.
				ctl.m.log.Warn("serving: adopt a replica", "app", ctl.name, "replica", fs[i].k.ID, "err", err)
			}
			fs[i].ad = ad
		}()
	}
	wg.Wait()
}

// adoptOne adopts the replica of f, on the ladder where its record and
// its node say it is (adoptedState). A running one that is neither
// frozen nor halted is returned, to be checked (probeAdopted,
// awaitAdopted).
func (ctl *appCtl) adoptOne(f found, now time.Time) (adoptee, bool) {
	r := &replica{rec: f.rec, state: stateNew, lastActive: now, soon: make(chan struct{}, 1)}
	r.rec.Addr = adoptedAddr(f.rec, f.ad)
	as := adoptedState(r.rec, f.ad)
	alive := as != StateDraining && as != StateFailed && as != StateStopped
	ctl.register(r, f.ad, alive, alive && f.rec.Addr == "")
	switch as {
	case StateDraining:
		ctl.adoptDraining(r)
		return adoptee{}, false
	case StateFailed, StateStopped:
		ctl.adoptDead(r)
		return adoptee{}, false
	}
	ctl.mu.Lock()
	ctl.adoptAs(r, as)
	if as == StateFrozen {
		// Its freeze timer runs on from when it froze, and it counts in
		// the frozen-memory budget at what it holds (as its node tells,
		// for a record of a daemon that kept none); it was last active
		// then.
		r.frozenAt = now
		if at := f.rec.FrozenAt; at != nil && !at.After(now) {
			r.frozenAt, r.lastActive = *at, *at
		}
		r.memory = f.rec.Memory
		if r.memory == 0 {
			r.memory = f.ad.Memory
		}
	}
	ctl.unlock()
	exited := make(chan struct{})
	go ctl.watch(r, exited)
	if as == StateFrozen || as == StateHalted {
		go ctl.healthLoop(r, exited)
		return adoptee{}, false
	}
	// Running: a ready one is ready again once it answers.
	return adoptee{r: r, exited: exited, wasReady: as == StateReady}, true
}

// adoptedAddr is the address of the replica whose record is rec, and of
// which its node says ad. One saved before its container started has
// none: the daemon was killed before its writer stored what followed
// (the replica may have been ready by then). The node knows it.
func adoptedAddr(rec replicaRecord, ad Adopted) string {
	if rec.Addr == "" && ad.Running && ad.Addr != "" && (rec.State == StatePending || rec.State == StateStarting) {
		return ad.Addr
	}
	return rec.Addr
}

// adoptedState is the state a replica whose record is rec, and of which
// its node says ad, is adopted in: a running one that was draining
// drains again; one that does not run, has no address or was on its way
// out is failed (when its record says so) or stopped; a frozen one stays
// frozen, a halted one halted (at its own request: out of the route); a
// ready one is ready, any other running one starting.
func adoptedState(rec replicaRecord, ad Adopted) State {
	switch {
	case ad.Running && rec.State == StateDraining:
		return StateDraining
	case !ad.Running || rec.State == StateFailed || rec.State == StateStopped || rec.State == StateDraining || rec.Addr == "":
		if rec.State == StateFailed {
			return StateFailed
		}
		return StateStopped
	case ad.Frozen:
		return StateFrozen
	case rec.State == StateHalted:
		return StateHalted
	case rec.State == StateReady:
		return StateReady
	}
	return StateStarting
}

// register makes r one of the app's replicas, at work already. An alive
// one's record takes the PID its node tells, and is written when its
// address came from the node (addrFromNode).
func (ctl *appCtl) register(r *replica, ad Adopted, alive, addrFromNode bool) {
	id := r.rec.ID
	ctl.mu.Lock()
	ctl.reps[id] = r
	if alive && ad.Pid != 0 && r.rec.Pid != ad.Pid {
		// Saved before its container started (the daemon was killed
		// while the replica started): the node knows the PID.
		r.rec.Pid = ad.Pid
		ctl.markDirty(id)
	}
	if addrFromNode {
		ctl.markDirty(id)
	}
	ctl.unlock()
	ctl.m.self.add(r.rec.TokenHash, ctl.name, id)
}

// adoptDraining adopts a replica that was leaving service: never routed
// again, nor killed with requests in flight (the proxy, which kept
// running, still counts them). It drains again, then stops.
func (ctl *appCtl) adoptDraining(r *replica) {
	ctl.mu.Lock()
	ctl.adoptAs(r, StateDraining)
	ctl.drainThenHalt(r)
	ctl.unlock()
	ctl.m.emit("drain", ctl.name, r.rec.ID, "draining when the daemon stopped; drains again after a restart", nil)
}

// adoptDead adopts a replica that does not run, or was on its way out:
// it is removed; a failed one stays listed with its reason.
func (ctl *appCtl) adoptDead(r *replica) {
	ctl.mu.Lock()
	if r.rec.State == StateFailed {
		ctl.adoptAs(r, StateFailed)
	} else {
		ctl.adoptAs(r, StateStopped)
	}
	ctl.unlock()
	go ctl.remove(r, true)
}

// awaitAdopted waits, in the background, for an adopted running replica
// that did not answer at once to pass its health check, as a starting
// one does: back in the route table once it answers.
func (ctl *appCtl) awaitAdopted(a adoptee) {
	r, exited := a.r, a.exited
	ctl.mu.Lock()
	ctl.move(r, mvUnanswered, "", nil)
	cfg := ctl.configOrCurrent(r.rec.Revision)
	ctl.unlock()
	go func() {
		if err := ctl.waitReady(r, cfg, exited); err != nil {
			if err != errExitedEarly && ctl.ctx().Err() == nil {
				ctl.failed(r, err, true)
			}
			return
		}
		ctl.mu.Lock()
		ctl.becomeReady(r, mvAdopted, adoptedWhy, nil)
		ctl.unlock()
		go ctl.healthLoop(r, exited)
		ctl.notify()
	}()
}

// adoptAtOnce bounds the adoptions a leader asks of the nodes at once.
const adoptAtOnce = 16

// adoptee is a running replica found at a restart.
type adoptee struct {
	r        *replica
	exited   chan struct{}
	wasReady bool // when the previous daemon stopped
	ready    bool // answered its health check at once
}

// probeAdopted checks at once, all together, the replicas that were ready
// when the previous daemon stopped: those that answer are ready again
// before the app's first route is published, so a proxy that kept running
// across the restart keeps sending them requests. The others wait for
// their health check as a starting replica does.
func (ctl *appCtl) probeAdopted(as []adoptee) {
	var wg sync.WaitGroup
	for i := range as {
		if !as[i].wasReady {
			continue
		}
		ctl.mu.Lock() // the replicas adopted are at work already
		cfg := ctl.configOrCurrent(as[i].r.rec.Revision)
		ctl.unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			as[i].ready = ctl.check(cfg.Health, as[i].r) == nil
		}()
	}
	wg.Wait()
	ctl.mu.Lock()
	defer ctl.unlock()
	for _, a := range as {
		if a.ready {
			ctl.becomeReady(a.r, mvAdopted, adoptedWhy, nil)
		}
	}
}

// adoptedWhy is the reason of a replica's adopt event.
const adoptedWhy = "running replica adopted after a daemon restart"
