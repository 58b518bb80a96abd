package serving

import (
	"errors"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
)

// errExitedEarly: the container exited before it was ready; the exit
// watcher reports why.
var errExitedEarly = errors.New("exited before it was ready")

// check checks replica r once with the app's health check, on its node.
func (ctl *appCtl) check(h manifest.Health, r *replica) error {
	ctl.mu.Lock()
	id, addr := r.rec.ID, r.rec.Addr
	ctl.unlock()
	return ctl.node.Check(ctl.ctx(), id, addr, h)
}

// waitReady probes a starting replica until it answers, it exits, or the
// start timeout passes. Probes are close together at first, because most
// apps are ready within milliseconds, and spread out later.
func (ctl *appCtl) waitReady(r *replica, cfg manifest.Config, exited <-chan struct{}) error {
	m := ctl.m
	began := m.clock.Now()
	limit := cfg.Health.StartTimeout.Duration
	// A command check runs once the port takes connections: an exec
	// costs a runtime process, a connect nearly nothing.
	port := cfg.Health
	if port.Command != nil {
		port.Command, port.TCP = nil, true
	}
	var last error
	for i := 0; ; i++ {
		select {
		case <-exited:
			return errExitedEarly
		default:
		}
		if last = ctl.node.Check(ctl.ctx(), r.rec.ID, r.rec.Addr, port); last == nil {
			if cfg.Health.Command == nil {
				return nil
			}
			if last = ctl.node.Check(ctl.ctx(), r.rec.ID, r.rec.Addr, cfg.Health); last == nil {
				return nil
			}
		}
		if ctl.ctx().Err() != nil {
			return ctl.ctx().Err()
		}
		if m.clock.Since(began) >= limit {
			return fmt.Errorf("replica %s: not ready after %s: %v", r.rec.ID, limit, last)
		}
		wait := 2 * time.Millisecond
		switch {
		case i > 300:
			wait = 50 * time.Millisecond
		case i > 100:
			wait = 10 * time.Millisecond
		}
		t := m.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-exited:
			t.Stop()
			return errExitedEarly
		case <-ctl.stop:
			t.Stop()
			return errors.New("daemon stopping")
		}
	}
}

// healthLoop checks a replica's health every interval while it is ready.
// It leaves the route table at the first failure; after
// cfg.Health.Failures in a row it is replaced, drained and stopped.
func (ctl *appCtl) healthLoop(r *replica, exited <-chan struct{}) {
	m := ctl.m
	fails := 0
	for {
		ctl.mu.Lock()
		h := ctl.rec.Config.Health
		if cfg, _, err := ctl.configOf(r.rec.Revision); err == nil {
			h = cfg.Health
		}
		ctl.unlock()
		t := m.clock.NewTimer(h.Interval.Duration)
		select {
		case <-t.C():
		case <-exited:
			t.Stop()
			return
		case <-ctl.stop:
			t.Stop()
			return
		}
		// checking keeps a freeze from stopping a command check half-way.
		r.checking.Lock()
		ctl.mu.Lock()
		check := r.state == StateReady
		ctl.unlock()
		if !check {
			r.checking.Unlock()
			fails = 0
			continue
		}
		err := ctl.check(h, r)
		r.checking.Unlock()
		if err == nil {
			if fails > 0 {
				ctl.setClosed(r, false)
			}
			fails = 0
			continue
		}
		// Out of the route table at the first failure; replaced after
		// Failures in a row.
		if fails++; fails == 1 {
			ctl.setClosed(r, true)
		}
		if fails < h.Failures {
			continue
		}
		if ctl.unreachable(r, err) {
			return
		}
		ctl.unhealthy(r, fmt.Errorf("replica %s failed %d health checks: %v", r.rec.ID, fails, err))
		return
	}
}

// setClosed takes a ready replica out of the route table or puts it back.
func (ctl *appCtl) setClosed(r *replica, closed bool) {
	ctl.mu.Lock()
	defer ctl.unlock()
	if r.state == StateReady && r.closed != closed {
		r.closed = closed
		ctl.publish()
	}
}
