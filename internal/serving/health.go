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
// apps are ready within milliseconds, and spread out later (readyPoll).
// It counts its probes in r.timing.
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
	for {
		select {
		case <-exited:
			return errExitedEarly
		default:
		}
		r.timing.checks++
		if last = ctl.node.Check(ctl.ctx(), r.rec.ID, r.rec.Addr, port); last == nil {
			if cfg.Health.Command == nil {
				return ctl.waitReadyCommand(r, cfg, began, exited)
			}
			if last = ctl.node.Check(ctl.ctx(), r.rec.ID, r.rec.Addr, cfg.Health); last == nil {
				return ctl.waitReadyCommand(r, cfg, began, exited)
			}
		}
		if ctl.ctx().Err() != nil {
			return ctl.ctx().Err()
		}
		since := m.clock.Since(began)
		if since >= limit {
			return fmt.Errorf("replica %s: not ready after %s: %v", r.rec.ID, limit, last)
		}
		if err := ctl.pause(readyPoll(since, ctl.woken.Load()), exited); err != nil {
			return err
		}
	}
}

// readyPoll is how long a starting replica waits for its next probe,
// since its first: while a request waits for the app (a cold start), every
// 500 µs for its first 100 ms, so that an app that boots in milliseconds
// is routed within half a millisecond of listening; else, and then, every
// 2 ms up to 300 ms, every 10 ms up to 2.3 s, and every 50 ms after. The
// fast probes are only for a request waiting: a burst of starts to scale
// out would spend on them the CPU its replicas boot with.
func readyPoll(since time.Duration, waited bool) time.Duration {
	switch {
	case waited && since < 100*time.Millisecond:
		return 500 * time.Microsecond
	case since < 300*time.Millisecond:
		return 2 * time.Millisecond
	case since < 2300*time.Millisecond:
		return 10 * time.Millisecond
	default:
		return 50 * time.Millisecond
	}
}

// readyCommandEvery is how often a stateful app's ready_command is run
// while a new replica waits for it.
const readyCommandEvery = 250 * time.Millisecond

// readyCommandTimeout bounds one run of ready_command, unless the health
// check's timeout is longer.
const readyCommandTimeout = 10 * time.Second

// waitReadyCommand runs a stateful app's ready_command in replica r, whose
// health check passed, until it exits 0, the replica exits, or the start
// timeout (counted from began) passes.
func (ctl *appCtl) waitReadyCommand(r *replica, cfg manifest.Config, began time.Time, exited <-chan struct{}) error {
	cmd := cfg.Stateful.ReadyCommand
	if cmd == nil {
		return nil
	}
	m := ctl.m
	h := manifest.Health{Command: cmd, Timeout: cfg.Health.Timeout}
	h.Timeout.Duration = max(h.Timeout.Duration, readyCommandTimeout)
	limit := cfg.Health.StartTimeout.Duration
	for {
		last := ctl.node.Check(ctl.ctx(), r.rec.ID, r.rec.Addr, h)
		if last == nil {
			return nil
		}
		if ctl.ctx().Err() != nil {
			return ctl.ctx().Err()
		}
		if m.clock.Since(began) >= limit {
			return fmt.Errorf("replica %s: ready_command did not pass within start_timeout %s: %v", r.rec.ID, limit, last)
		}
		if err := ctl.pause(readyCommandEvery, exited); err != nil {
			return err
		}
	}
}

// pause waits d between two tries at a new replica's readiness: it ends
// early with an error when the replica exits or the daemon stops.
func (ctl *appCtl) pause(d time.Duration, exited <-chan struct{}) error {
	t := ctl.m.clock.NewTimer(d)
	select {
	case <-t.C():
		return nil
	case <-exited:
		t.Stop()
		return errExitedEarly
	case <-ctl.stop:
		t.Stop()
		return errors.New("daemon stopping")
	}
}

// healthLoop checks a replica's health every interval while it is ready
// (verdicts in healthCount). While the replica proves itself alive (the
// proxy had answers from it since the last interval) the check is made
// rarer: one in provenEvery intervals; the others count neither way.
// While it has no traffic at all and passes, its checks space out
// (healthCount.wait; not a stateful app's); traffic to its app after a quiet spell (checkSoon)
// or a failed check brings them back to every interval.
func (ctl *appCtl) healthLoop(r *replica, exited <-chan struct{}) {
	m := ctl.m
	var c healthCount
	answered := ctl.answered(r)
	for {
		ctl.mu.Lock()
		h, stateful := ctl.rec.Config.Health, ctl.rec.Config.Stateful.Enabled()
		if cfg, _, err := ctl.configOf(r.rec.Revision); err == nil {
			h, stateful = cfg.Health, cfg.Stateful.Enabled()
		}
		ctl.unlock()
		wait := c.wait(h.Interval.Duration)
		if stateful {
			wait = h.Interval.Duration // no idle spacing (idleCheckMax)
		}
		t := m.clock.NewTimer(wait)
		r.armedAt.Store(m.clock.Now().UnixNano())
		select {
		case <-t.C():
		case <-r.soon:
			t.Stop()
			c.idle = 0
			continue
		case <-exited:
			t.Stop()
			return
		case <-ctl.stop:
			t.Stop()
			return
		}
		if ctl.healthTick(r, h, &c, &answered) {
			return
		}
	}
}

// checkSoon brings the health checks of the app's ready replicas back to
// their interval: a request came after a quiet spell.
func (ctl *appCtl) checkSoon() {
	ctl.mu.Lock()
	defer ctl.unlock()
	for _, r := range ctl.reps {
		if r.state == StateReady {
			poke(r.soon)
		}
	}
}

// provenEvery: while a replica answers traffic, one interval in this many
// has a health check.
const provenEvery = 10

// After idleChecksAfter passed checks in a row without traffic, a
// replica's checks space out, the wait doubling from its interval up to
// idleCheckMax (or the interval, when longer): hundreds of idle ready
// replicas cost the daemon, and themselves, next to nothing. A hung
// replica that gets no request harms no one meanwhile; the first request
// brings its checks back to every interval (checkSoon), and a dead one
// is seen at once (its exit through its pidfd). Not a stateful app's
// replicas: they are few, their peers and clients often reach them
// without the proxy (a cluster's replication, a database client on the
// replica's address), so no request seen is no sign of idleness, and a
// hung member stalls its peers: their checks stay every interval.
const (
	idleChecksAfter = 5
	idleCheckMax    = 30 * time.Second
)

// wait is how long until the next interval of the health loop: the
// interval, or longer once the replica has passed more than
// idleChecksAfter checks in a row without traffic.
func (c *healthCount) wait(interval time.Duration) time.Duration {
	if c.idle <= idleChecksAfter || interval >= idleCheckMax {
		return interval
	}
	w := interval
	for i := idleChecksAfter; i < c.idle && w < idleCheckMax; i++ {
		w *= 2
	}
	return min(w, idleCheckMax)
}

// healthTick is one interval of r's health loop: a check, counted by c,
// unless r answered traffic since the last interval (answered counts its
// answers) and its check is not due. It returns true once r is replaced.
func (ctl *appCtl) healthTick(r *replica, h manifest.Health, c *healthCount, answered *uint64) bool {
	// checking keeps a freeze from stopping a command check half-way.
	r.checking.Lock()
	ctl.mu.Lock()
	check, closed := r.state == StateReady, r.closed
	ctl.unlock()
	if !check {
		r.checking.Unlock()
		*c = healthCount{}
		return false
	}
	// The proxy lists no endpoint out of the route with nothing in
	// flight (0); its count is the same when it is routed again.
	el := ctl.m.o.Router.Load(ctl.name).Endpoints[r.rec.ID]
	a := el.Answered
	proven := a != 0 && a != *answered
	if proven {
		*answered = a
	}
	busy := el.InFlight > 0 || el.Requests != c.requests
	c.requests = el.Requests
	if proven && c.skipped < provenEvery-1 {
		c.skipped++
		c.idle = 0
		r.checking.Unlock()
		return false
	}
	c.skipped = 0
	err := ctl.check(h, r)
	r.checking.Unlock()
	c.out = closed
	if err != nil || busy || closed {
		c.idle = 0
	} else {
		c.idle++
	}
	switch c.observe(err == nil, h) {
	case healthLeave:
		ctl.setClosed(r, true, fmt.Sprintf("out of the route: %d health checks failed in a row: %v", c.fails, err))
	case healthBack:
		ctl.setClosed(r, false, fmt.Sprintf("back in the route: %d health checks passed in a row", c.passes))
	case healthReplace:
		if !ctl.unreachable(r, err) {
			ctl.unhealthy(r, fmt.Errorf("replica %s failed %d health checks in a row: %v", r.rec.ID, c.fails, err))
		}
		return true
	}
	return false
}

// answered is how many requests the proxy had answered by replica r.
func (ctl *appCtl) answered(r *replica) uint64 {
	return ctl.m.o.Router.Load(ctl.name).Endpoints[r.rec.ID].Answered
}

// healthCount counts a ready replica's health checks in a row.
// Readiness: FailureThreshold failed ones take it out of the route table,
// SuccessThreshold passed ones put it back. Liveness: out of the route,
// Failures more failed ones replace it.
type healthCount struct {
	out    bool // out of the route table
	fails  int  // failed checks in a row
	passes int  // passed checks in a row
	failed int  // of fails, those since it left the route
	// skipped counts the intervals since the last check, which it skipped
	// while the replica answered traffic.
	skipped int
	// idle counts the passed checks in a row with no traffic between;
	// requests is the proxy's count of requests to it at the last.
	idle     int
	requests uint64
}

// healthVerdict is what a check's result does to its replica.
type healthVerdict int

const (
	healthStay    healthVerdict = iota // nothing changes
	healthLeave                        // it leaves the route table
	healthBack                         // it is back in the route table
	healthReplace                      // it is replaced
)

// observe counts one check, passed or not, by h's thresholds (0: the
// defaults, as in a record written before they were) and returns its
// verdict.
func (c *healthCount) observe(passed bool, h manifest.Health) healthVerdict {
	leaveAt, backAt := h.FailureThreshold, h.SuccessThreshold
	if leaveAt < 1 {
		leaveAt = manifest.DefaultFailureThreshold
	}
	if backAt < 1 {
		backAt = manifest.DefaultSuccessThreshold
	}
	if passed {
		c.fails, c.failed = 0, 0
		c.passes++
		if c.out && c.passes >= backAt {
			c.out = false
			return healthBack
		}
		return healthStay
	}
	c.passes = 0
	c.fails++
	if c.out {
		if c.failed++; c.failed >= h.Failures {
			return healthReplace
		}
		return healthStay
	}
	if c.fails >= leaveAt {
		c.out = true
		return healthLeave
	}
	return healthStay
}

// setClosed takes a ready replica out of the route table or puts it back,
// with an event saying why.
func (ctl *appCtl) setClosed(r *replica, closed bool, why string) {
	ctl.mu.Lock()
	defer ctl.unlock()
	if r.state == StateReady && r.closed != closed {
		r.closed = closed
		ctl.m.emit("health", ctl.name, r.rec.ID, why, nil)
		ctl.publish()
	}
}
