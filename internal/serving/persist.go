package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/shoal-run/shoal/internal/store"
)

// writer writes replica records to the store off the request path: state
// changes (a thaw above all) never wait for the store's fsync. One writer
// per app keeps each key's writes in order.
func (ctl *appCtl) writer() {
	for {
		select {
		case <-ctl.stop:
			ctl.flush()
			return
		case <-ctl.dirty:
			ctl.flush()
		}
	}
}

// flush writes the app record if it changed, and every dirty replica
// record (or deletes it); then the routes held until the store holds
// what was decided before it began go out (see hold).
func (ctl *appCtl) flush() {
	ctl.recMu.Lock()
	ctl.mu.Lock()
	upto := ctl.holds
	var appVal []byte
	if ctl.appDirty && !ctl.deleting {
		appVal, _ = json.Marshal(ctl.rec)
	}
	ctl.appDirty = false
	type op struct {
		id  string
		val []byte
	}
	ops := make([]op, 0, len(ctl.unsaved))
	for id := range ctl.unsaved {
		o := op{id: id}
		if r := ctl.reps[id]; r != nil {
			o.val, _ = json.Marshal(r.rec)
		}
		ops = append(ops, o)
	}
	clear(ctl.unsaved)
	ctl.unlock()
	ctx := context.Background()
	if appVal != nil {
		if err := ctl.lead.put(ctx, store.AppKey(ctl.name), appVal); err != nil {
			ctl.m.log.Error("serving: write app record", "app", ctl.name, "err", err)
		}
	}
	for _, o := range ops {
		key := store.ReplicaKey(ctl.name, o.id)
		var err error
		if o.val == nil {
			err = ctl.lead.del(ctx, key)
		} else {
			err = ctl.lead.put(ctx, key, o.val)
		}
		if err != nil {
			ctl.m.log.Error("serving: write replica record", "key", key, "err", err)
		}
	}
	ctl.recMu.Unlock()
	// Out even when a write failed: the app is not left without routes.
	ctl.release(upto)
}

// adopt takes over the replicas a previous daemon on this node left: a
// running container is ready again once it answers its health check, a
// frozen one stays frozen, a draining one drains again and stops, and
// anything else is cleaned up.
func (d *driver) adopt(ctx context.Context) error {
	m := d.m
	kvs, err := m.o.Store.List(ctx, store.ReplicasPrefix(d.name))
	if err != nil {
		return fmt.Errorf("app %q: list replicas: %w", d.name, err)
	}
	if err := os.MkdirAll(d.logs.dir, 0o700); err != nil {
		return fmt.Errorf("app %q: %w", d.name, err)
	}
	if err := d.loadRevisions(ctx); err != nil {
		// Replicas of the current revision still start.
		m.log.Error("serving: revisions", "app", d.name, "err", err)
	}
	now := m.clock.Now()
	type found struct {
		rec replicaRecord
		k   Known
		ad  Adopted
	}
	var fs []found
	for _, kv := range kvs {
		var rec replicaRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.ID == "" {
			m.log.Error("serving: unreadable replica record; removed", "key", kv.Key, "err", err)
			d.lead.del(ctx, kv.Key)
			continue
		}
		if rec.Node != m.o.Node && m.disp == nil {
			continue
		}
		if m.disp != nil && rec.Node != "" && !m.disp.IsLive(rec.Node) {
			// Its node is lost: nothing is called there, and the
			// controller replaces it.
			d.lead.del(ctx, kv.Key)
			m.emit("lost", d.name, rec.ID, fmt.Sprintf("node %s is lost; the replica is replaced on a live node", rec.Node), nil)
			continue
		}
		d.mu.Lock()
		cfg, _, _ := d.configOf(rec.Revision)
		d.unlock()
		k := Known{ID: rec.ID, App: rec.App, CPUSet: rec.CPUSet, Port: cfg.Port}
		if m.disp != nil {
			k.Node, k.CPU, k.Memory = rec.Node, cfg.Resources.CPU, cfg.Resources.MemoryBytes()
		}
		fs = append(fs, found{rec: rec, k: k})
	}
	// A cluster's replicas are asked for on their nodes, a few at once: a
	// new leader adopts them all before it runs the app.
	par := 1
	if m.disp != nil {
		par = adoptAtOnce
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range fs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ad, err := d.node.Adopt(ctx, fs[i].k)
			if err != nil {
				// Not known to run: replaced.
				m.log.Warn("serving: adopt a replica", "app", d.name, "replica", fs[i].k.ID, "err", err)
			}
			fs[i].ad = ad
		}()
	}
	wg.Wait()
	var running []adoptee
	for _, f := range fs {
		rec, ad := f.rec, f.ad
		r := &replica{rec: rec, state: stateNew, lastActive: now}
		if rec.Addr == "" && ad.Running && ad.Addr != "" && (rec.State == StatePending || rec.State == StateStarting) {
			// Saved before its container started: the daemon was killed
			// before its writer stored what followed (the replica may
			// have been ready by then). The node knows the address.
			r.rec.Addr = ad.Addr
		}
		alive := ad.Running && rec.State != StateFailed && rec.State != StateStopped && rec.State != StateDraining &&
			r.rec.Addr != ""
		// The replicas adopted so far are at work already.
		d.mu.Lock()
		d.reps[rec.ID] = r
		if alive && ad.Pid != 0 && rec.Pid != ad.Pid {
			// Saved before its container started (the daemon was killed
			// while the replica started): the node knows the PID.
			r.rec.Pid = ad.Pid
			d.markDirty(rec.ID)
		}
		if alive && rec.Addr == "" {
			d.markDirty(rec.ID)
		}
		d.unlock()
		m.self.add(rec.TokenHash, d.name, rec.ID)
		if ad.Running && rec.State == StateDraining {
			// It was leaving service: never routed again, nor killed with
			// requests in flight (the proxy, which kept running, still
			// counts them). It drains again, then stops.
			d.mu.Lock()
			d.adoptAs(r, StateDraining)
			d.drainThenHalt(r)
			d.unlock()
			m.emit("drain", d.name, rec.ID, "draining when the daemon stopped; drains again after a restart", nil)
			continue
		}
		if !alive {
			// Removed; a failed one stays listed with its reason.
			d.mu.Lock()
			if rec.State == StateFailed {
				d.adoptAs(r, StateFailed)
			} else {
				d.adoptAs(r, StateStopped)
			}
			d.unlock()
			go d.remove(r, true)
			continue
		}
		exited := make(chan struct{})
		if ad.Frozen {
			d.mu.Lock()
			d.adoptAs(r, StateFrozen)
			r.frozenAt = now
			d.unlock()
			go d.watch(r, exited)
			go d.healthLoop(r, exited)
			continue
		}
		if rec.State == StateHalted {
			// Halted at its own request: it stays out of the route.
			d.mu.Lock()
			d.adoptAs(r, StateHalted)
			d.unlock()
			go d.watch(r, exited)
			go d.healthLoop(r, exited)
			continue
		}
		// Running: a ready one is ready again once it answers.
		wasReady := rec.State == StateReady
		d.mu.Lock()
		if wasReady {
			d.adoptAs(r, StateReady)
		} else {
			d.adoptAs(r, StateStarting)
		}
		d.unlock()
		go d.watch(r, exited)
		running = append(running, adoptee{r: r, exited: exited, wasReady: wasReady})
	}
	d.probeAdopted(running)
	for _, a := range running {
		r, exited := a.r, a.exited
		if a.ready {
			go d.healthLoop(r, exited)
			continue
		}
		// Running: back in the route table once it answers.
		d.mu.Lock()
		d.move(r, mvUnanswered, "", nil)
		cfg := d.rec.Config
		if c, _, err := d.configOf(r.rec.Revision); err == nil {
			cfg = c
		}
		d.unlock()
		go func() {
			if err := d.waitReady(r, cfg, exited); err != nil {
				if err != errExitedEarly && d.ctx().Err() == nil {
					d.failed(r, err, true)
				}
				return
			}
			d.mu.Lock()
			d.becomeReady(r, mvAdopted, adoptedWhy, nil)
			d.unlock()
			go d.healthLoop(r, exited)
			d.notify()
		}()
	}
	d.logs.prune(d.has)
	d.merge.retireOrphans(d.has)
	return nil
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
func (d *driver) probeAdopted(as []adoptee) {
	var wg sync.WaitGroup
	for i := range as {
		if !as[i].wasReady {
			continue
		}
		d.mu.Lock() // the replicas adopted are at work already
		cfg := d.rec.Config
		if c, _, err := d.configOf(as[i].r.rec.Revision); err == nil {
			cfg = c
		}
		d.unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			as[i].ready = d.check(cfg.Health, as[i].r) == nil
		}()
	}
	wg.Wait()
	d.mu.Lock()
	defer d.unlock()
	for _, a := range as {
		if a.ready {
			d.becomeReady(a.r, mvAdopted, adoptedWhy, nil)
		}
	}
}

// adoptedWhy is the reason of a replica's adopt event.
const adoptedWhy = "running replica adopted after a daemon restart"

// loadRevisions reads every revision of the app from the store, so that
// the controller never waits for the store under ctl.mu: revisions are
// immutable, and a deploy adds its own.
func (ctl *appCtl) loadRevisions(ctx context.Context) error {
	kvs, err := ctl.m.o.Store.List(ctx, store.RevisionsPrefix(ctl.name))
	if err != nil {
		return fmt.Errorf("app %q: list revisions: %w", ctl.name, err)
	}
	revs := make(map[int]revisionRecord, len(kvs))
	for _, kv := range kvs {
		var rv revisionRecord
		if err := json.Unmarshal(kv.Value, &rv); err != nil {
			ctl.m.log.Error("serving: unreadable revision record; skipped", "key", kv.Key, "err", err)
			continue
		}
		revs[rv.N] = rv
	}
	ctl.mu.Lock()
	for n, rv := range revs {
		ctl.revs[n] = rv
	}
	ctl.unlock()
	return nil
}
