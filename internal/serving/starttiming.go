package serving

import "time"

// startTiming is where a replica's start spent its time, logged at debug
// level once it is routed ("serving: start timing"): from the request that
// woke its app, if one did, to the start's decision; the node's start (or
// a premade replica's boot); the probes until its port took a connection;
// and its route published. Measured on the controller's clock.
type startTiming struct {
	woken   time.Time // when a request began to wait for the app; zero: none did
	decided time.Time // when the start was decided
	started time.Time // when the node's start returned
	open    time.Time // when a probe first passed
	checks  int       // readiness probes made
}

// timeStart marks r's start as decided now, for a request that waits since
// the app was woken, if one does. ctl.mu is held.
func (ctl *appCtl) timeStart(r *replica, now time.Time) {
	r.timing = startTiming{decided: now}
	if ctl.woken.Load() {
		r.timing.woken = time.Unix(0, ctl.wokenAt.Load())
	}
}

// logStartTiming logs replica r's start timing, routed at routed.
func (ctl *appCtl) logStartTiming(r *replica, premade bool, routed time.Time) {
	t := r.timing
	args := []any{"app", ctl.name, "replica", r.rec.ID, "premade", premade,
		"start", t.started.Sub(t.decided), "boot", t.open.Sub(t.started), "probes", t.checks, "route", routed.Sub(t.open),
		"total", routed.Sub(t.decided)}
	if !t.woken.IsZero() {
		args = append(args, "woken", t.decided.Sub(t.woken), "since_woken", routed.Sub(t.woken))
	}
	ctl.m.log.Debug("serving: start timing", args...)
}
