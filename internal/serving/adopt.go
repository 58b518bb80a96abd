package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/shoal-run/shoal/internal/store"
)

// adopt takes over the replicas a previous daemon on this node left: a
// running container is ready again once it answers its health check, a
// frozen one stays frozen, a draining one drains again and stops, and
// anything else is cleaned up.
func (ctl *appCtl) adopt(ctx context.Context) error {
	m := ctl.m
	kvs, err := m.o.Store.List(ctx, store.ReplicasPrefix(ctl.name))
	if err != nil {
		return fmt.Errorf("app %q: list replicas: %w", ctl.name, err)
	}
	if err := os.MkdirAll(ctl.logs.dir, 0o700); err != nil {
		return fmt.Errorf("app %q: %w", ctl.name, err)
	}
	if err := ctl.loadRevisions(ctx); err != nil {
		// Replicas of the current revision still start.
		m.log.Error("serving: revisions", "app", ctl.name, "err", err)
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
			ctl.lead.del(ctx, kv.Key)
			continue
		}
		if rec.Node != m.o.Node && m.disp == nil {
			continue
		}
		if m.disp != nil && rec.Node != "" && !m.disp.IsLive(rec.Node) {
			// Its node is lost: nothing is called there, and the
			// controller replaces it.
			ctl.lead.del(ctx, kv.Key)
			m.emit("lost", ctl.name, rec.ID, fmt.Sprintf("node %s is lost; the replica is replaced on a live node", rec.Node), nil)
			continue
		}
		ctl.mu.Lock()
		cfg, _, _ := ctl.configOf(rec.Revision)
		ctl.unlock()
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
			ad, err := ctl.node.Adopt(ctx, fs[i].k)
			if err != nil {
				// Not known to run: replaced.
				m.log.Warn("serving: adopt a replica", "app", ctl.name, "replica", fs[i].k.ID, "err", err)
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
		ctl.mu.Lock()
		ctl.reps[rec.ID] = r
		if alive && ad.Pid != 0 && rec.Pid != ad.Pid {
			// Saved before its container started (the daemon was killed
			// while the replica started): the node knows the PID.
			r.rec.Pid = ad.Pid
			ctl.markDirty(rec.ID)
		}
		if alive && rec.Addr == "" {
			ctl.markDirty(rec.ID)
		}
		ctl.unlock()
		m.self.add(rec.TokenHash, ctl.name, rec.ID)
		if ad.Running && rec.State == StateDraining {
			// It was leaving service: never routed again, nor killed with
			// requests in flight (the proxy, which kept running, still
			// counts them). It drains again, then stops.
			ctl.mu.Lock()
			ctl.adoptAs(r, StateDraining)
			ctl.drainThenHalt(r)
			ctl.unlock()
			m.emit("drain", ctl.name, rec.ID, "draining when the daemon stopped; drains again after a restart", nil)
			continue
		}
		if !alive {
			// Removed; a failed one stays listed with its reason.
			ctl.mu.Lock()
			if rec.State == StateFailed {
				ctl.adoptAs(r, StateFailed)
			} else {
				ctl.adoptAs(r, StateStopped)
			}
			ctl.unlock()
			go ctl.remove(r, true)
			continue
		}
		exited := make(chan struct{})
		if ad.Frozen {
			ctl.mu.Lock()
			ctl.adoptAs(r, StateFrozen)
			r.frozenAt = now
			ctl.unlock()
			go ctl.watch(r, exited)
			go ctl.healthLoop(r, exited)
			continue
		}
		if rec.State == StateHalted {
			// Halted at its own request: it stays out of the route.
			ctl.mu.Lock()
			ctl.adoptAs(r, StateHalted)
			ctl.unlock()
			go ctl.watch(r, exited)
			go ctl.healthLoop(r, exited)
			continue
		}
		// Running: a ready one is ready again once it answers.
		wasReady := rec.State == StateReady
		ctl.mu.Lock()
		if wasReady {
			ctl.adoptAs(r, StateReady)
		} else {
			ctl.adoptAs(r, StateStarting)
		}
		ctl.unlock()
		go ctl.watch(r, exited)
		running = append(running, adoptee{r: r, exited: exited, wasReady: wasReady})
	}
	ctl.probeAdopted(running)
	for _, a := range running {
		r, exited := a.r, a.exited
		if a.ready {
			go ctl.healthLoop(r, exited)
			continue
		}
		// Running: back in the route table once it answers.
		ctl.mu.Lock()
		ctl.move(r, mvUnanswered, "", nil)
		cfg := ctl.rec.Config
		if c, _, err := ctl.configOf(r.rec.Revision); err == nil {
			cfg = c
		}
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
	ctl.logs.prune(ctl.has)
	ctl.merge.retireOrphans(ctl.has)
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
func (ctl *appCtl) probeAdopted(as []adoptee) {
	var wg sync.WaitGroup
	for i := range as {
		if !as[i].wasReady {
			continue
		}
		ctl.mu.Lock() // the replicas adopted are at work already
		cfg := ctl.rec.Config
		if c, _, err := ctl.configOf(as[i].r.rec.Revision); err == nil {
			cfg = c
		}
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
