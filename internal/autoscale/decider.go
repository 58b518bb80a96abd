package autoscale

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// Sample is one observation of an app's load.
type Sample struct {
	// At is when the sample was taken; zero means the decider's clock now.
	At time.Time
	// Concurrency is the app's in-flight plus queued requests: best the
	// proxy's average over the interval since the previous sample, else the
	// value at At.
	Concurrency float64
	// Requests is how many requests arrived since the previous sample. It
	// lets short requests that no sample caught in flight still count as
	// traffic, so an app with a trickle of fast requests is not scaled to 0.
	Requests int
	// Metric is the app's own metric (Policy.Metric) summed over its ready
	// replicas, a replica that did not publish it counting 0. It replaces
	// Concurrency as what the windows average when the policy names a
	// metric.
	Metric float64
}

// ReplicaCPU is one replica's CPU quota and its cgroup's cumulative CFS
// counters (cpu.stat nr_periods and nr_throttled).
type ReplicaCPU struct {
	ID string
	// Quota is the replica's quota in cores now; 0 means the policy's CPU.
	Quota              float64
	Periods, Throttled uint64
	// InFlight is how many requests the replica is serving now: demand
	// for its CPU even when it is not throttled.
	InFlight int
	// Used is the CPU time the replica used (cumulative): with requests
	// waiting on it, using nearly all its quota is a want of more.
	Used time.Duration
	// Stalled is how long some task of the replica waited for a CPU
	// (cumulative PSI "some"), when Pressure says its cgroup tells.
	Stalled  time.Duration
	Pressure bool
	// At is when the counters were read; zero means the decider's clock
	// now. The share of its quota a replica used is measured between
	// readings.
	At time.Time
}

// Current is what the app runs now.
type Current struct {
	// Replicas counts the active (starting or ready) replicas.
	Replicas int
	// CPU has one entry per active replica whose counters could be read.
	CPU []ReplicaCPU
}

// Decision is what the controller should do, with why, for the event log.
type Decision struct {
	At time.Time
	// Replicas is the wanted count of active replicas.
	Replicas int
	// CPU maps a replica id to its new quota in cores; it holds only the
	// replicas whose quota changes, and is nil when none does.
	CPU map[string]float64
	// Panic is true while the decider is in panic mode.
	Panic bool
	// Reason says in words what was decided and why.
	Reason string
	// Inputs are the numbers the decision was made from, by name.
	Inputs map[string]float64
}

// Decider holds one app's recent samples and per-replica CPU counters. Its
// methods are safe for concurrent use.
type Decider struct {
	mu    sync.Mutex
	p     Policy
	clock clock.Clock

	samples []Sample  // time order, inside the stable window
	first   time.Time // the first sample ever observed

	panicking bool
	panicLast time.Time // when the panic threshold was last crossed
	maxPanic  int       // the highest count wanted in this panic

	lowSince time.Time // since when the want has been below the count
	lastDown time.Time // the last shrinking step
	// downTo is the count the last shrinking step decided, while the want
	// has stayed below the count since (stepped): the count the
	// controller converges to, which a hold must not undo.
	downTo  int
	stepped bool
	wants   []stamped // decreasing wants of the last ScaleDownDelay
	cpu     map[string]*cpuState
}

type stamped struct {
	at   time.Time
	want int
}

// New returns a Decider for policy p (defaults filled in) on clock c.
func New(p Policy, c clock.Clock) (*Decider, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Decider{p: p, clock: c, cpu: map[string]*cpuState{}}, nil
}

// SetPolicy replaces the policy (defaults filled in), keeping the samples,
// the panic state and the CPU counters, for an app whose bounds changed.
func (d *Decider) SetPolicy(p Policy) error {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.p = p
	return nil
}

// Policy returns the policy in force, defaults filled in.
func (d *Decider) Policy() Policy {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.p
}

// Observe records a sample. Samples must come in time order; one older than
// the last is ignored. A negative or NaN concurrency counts as 0.
func (d *Decider) Observe(s Sample) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.At.IsZero() {
		s.At = d.clock.Now()
	}
	if n := len(d.samples); n > 0 && s.At.Before(d.samples[n-1].At) {
		return
	}
	if !(s.Concurrency > 0) {
		s.Concurrency = 0
	}
	if !(s.Metric > 0) || math.IsInf(s.Metric, 1) {
		s.Metric = 0
	}
	if d.first.IsZero() {
		d.first = s.At
	}
	d.samples = append(d.samples, s)
	d.prune(d.clock.Now())
}

// prune drops samples at or before the start of the stable window.
func (d *Decider) prune(now time.Time) {
	from := now.Add(-d.p.StableWindow)
	i := 0
	for i < len(d.samples) && !d.samples[i].At.After(from) {
		i++
	}
	if i > 0 {
		d.samples = append(d.samples[:0], d.samples[i:]...)
	}
}

// Decide returns the wanted replica count and quota changes for what the
// app runs now. The controller calls it periodically (say every second)
// and acts on it.
func (d *Decider) Decide(cur Current) Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	d.prune(now)
	cur.Replicas = max(cur.Replicas, 0)
	dec := Decision{At: now, Inputs: map[string]float64{
		"current":               float64(cur.Replicas),
		"min":                   float64(d.p.Min),
		"max":                   float64(d.p.Max),
		"target_" + d.p.input(): d.p.target(),
	}}
	cpuNotes, saturated := d.decideCPU(now, cur, &dec)
	reason := d.decideReplicas(now, cur.Replicas, saturated, &dec)
	dec.Reason = strings.Join(append([]string{reason}, cpuNotes...), "; ")
	return dec
}

// window is what the samples of the stable and panic windows say.
type window struct {
	stable, panic   float64 // mean concurrency
	stableN, panicN int
	traffic         bool // any concurrency or arrival in the stable window
}

func (d *Decider) window(now time.Time) window {
	var w window
	from := now.Add(-d.p.PanicWindow)
	var ssum, psum float64
	for _, s := range d.samples {
		v := d.p.value(s)
		ssum += v
		w.stableN++
		if v > 0 || s.Concurrency > 0 || s.Requests > 0 {
			w.traffic = true
		}
		if s.At.After(from) {
			psum += v
			w.panicN++
		}
	}
	if w.stableN > 0 {
		w.stable = ssum / float64(w.stableN)
	}
	w.panic = w.stable // no sample in the panic window: no evidence of a burst
	if w.panicN > 0 {
		w.panic = psum / float64(w.panicN)
	}
	return w
}

// replicasFor is ceil(c / target), forgiving float noise at exact multiples.
func (d *Decider) replicasFor(c float64) int {
	r := math.Ceil(c/d.p.target() - 1e-9)
	return int(min(max(r, 0), math.MaxInt32))
}

// decideReplicas sets dec.Replicas and dec.Panic and returns the reason.
func (d *Decider) decideReplicas(now time.Time, n, saturated int, dec *Decision) string {
	p := d.p
	if len(d.samples) == 0 {
		d.panicking, d.maxPanic = false, 0
		why := "no samples yet"
		if !d.first.IsZero() {
			why = fmt.Sprintf("no samples in the last %s", p.StableWindow)
		}
		dec.Replicas, why = d.clampWhy(n, why)
		return bounded(n, dec.Replicas, why)
	}
	w := d.window(now)
	ready := max(n, 1)
	stableWant, panicWant := d.replicasFor(w.stable), d.replicasFor(w.panic)
	ratio := w.panic / p.target() / float64(ready)
	dec.Inputs["stable_"+p.input()] = w.stable
	dec.Inputs["panic_"+p.input()] = w.panic
	dec.Inputs["stable_samples"] = float64(w.stableN)
	dec.Inputs["panic_samples"] = float64(w.panicN)
	dec.Inputs["panic_ratio"] = ratio
	dec.Inputs["stable_want"] = float64(stableWant)
	dec.Inputs["panic_want"] = float64(panicWant)
	dec.Inputs["saturated_replicas"] = float64(saturated)

	if ratio >= p.PanicThreshold {
		d.panicking, d.panicLast = true, now
	} else if d.panicking && now.Sub(d.panicLast) >= p.StableWindow {
		d.panicking, d.maxPanic = false, 0
	}
	if d.panicking {
		want, bound := d.clampWhy(max(panicWant, stableWant, n, d.maxPanic), "")
		d.maxPanic = want
		d.lowSince, d.stepped = time.Time{}, false
		d.record(now, want)
		dec.Replicas, dec.Panic = want, true
		if ratio >= p.PanicThreshold {
			return bounded(n, want, fmt.Sprintf("panic: %s %s %.1f is %.1fx what %d replica(s) serve at target %g%s, no scale-down until %s calm",
				p.PanicWindow, p.signal(), w.panic, ratio, ready, p.target(), bound, p.StableWindow))
		}
		return bounded(n, want, fmt.Sprintf("panic: threshold last crossed %s ago, %s %s %.1f%s, no scale-down for %s more",
			now.Sub(d.panicLast), p.PanicWindow, p.signal(), w.panic, bound, p.StableWindow-now.Sub(d.panicLast)))
	}

	want := stableWant
	why := fmt.Sprintf("%s %s %.1f at target %g wants %d", p.StableWindow, p.signal(), w.stable, p.target(), stableWant)
	if want == 0 && w.traffic {
		want = 1
		why = fmt.Sprintf("%s saw traffic, wants 1", p.StableWindow)
	}
	if want == 0 && n > 0 && d.first.After(now.Add(-p.StableWindow)) {
		want = 1
		why = fmt.Sprintf("no traffic, but observed for less than %s, wants 1", p.StableWindow)
	}
	if p.Metric == "" && saturated*2 >= max(n, 1) && saturated > 0 && w.stable > float64(n) && want <= n {
		want = min(n+1, int(math.Ceil(w.stable)))
		why = fmt.Sprintf("%d of %d replica(s) throttled at their CPU ceiling with %.1f requests to spread, wants %d", saturated, n, w.stable, want)
	}
	if want == 0 {
		why = fmt.Sprintf("no traffic in the last %s, wants 0", p.StableWindow)
	}
	want, why = d.clampWhy(want, why)
	d.record(now, want)

	switch {
	case want >= n:
		d.lowSince, d.stepped = time.Time{}, false
		dec.Replicas = want
		return bounded(n, want, why)
	case n > p.Max:
		// Bounds do not wait for the delay.
		d.lastDown, d.downTo, d.stepped = now, p.Max, true
		dec.Replicas = p.Max
		return fmt.Sprintf("%s; %d→%d, capped at max %d", why, n, p.Max, p.Max)
	}
	if d.lowSince.IsZero() {
		d.lowSince = now
	}
	since := d.lowSince
	if d.lastDown.After(since) {
		since = d.lastDown
	}
	if held := now.Sub(since); held < p.ScaleDownDelay {
		left := (p.ScaleDownDelay - held).Round(time.Millisecond)
		if d.stepped && d.downTo < n {
			// Hysteresis: the last step down stands while the count
			// follows it (the last replica of an idle app stays ready
			// until idle_timeout); holding n would undo it, and the next
			// step redo it, every scale-down delay.
			hold := max(d.downTo, want)
			dec.Replicas = hold
			return fmt.Sprintf("%s; keeping the step down to %d while %d run, %s more of the %s scale-down delay", why, hold, n, left, p.ScaleDownDelay)
		}
		dec.Replicas = n
		return fmt.Sprintf("%s; holding %d for %s more of the %s scale-down delay", why, n, left, p.ScaleDownDelay)
	}
	target := d.recentMax()
	floor := (n + 1) / 2
	if target == 0 && n == 1 {
		floor = 0
	}
	down := min(max(target, floor), n)
	d.lastDown, d.downTo, d.stepped = now, down, true
	dec.Replicas = down
	dec.Inputs["delay_max_want"] = float64(target)
	if down > target {
		return fmt.Sprintf("%s; %d→%d (at most halving per step; the last %s wanted at most %d)", why, n, down, p.ScaleDownDelay, target)
	}
	return fmt.Sprintf("%s; %d→%d after the %s scale-down delay", why, n, down, p.ScaleDownDelay)
}

// clampWhy bounds want to [Min, Max] and says so when a bound decided.
func (d *Decider) clampWhy(want int, why string) (int, string) {
	switch {
	case want < d.p.Min:
		return d.p.Min, fmt.Sprintf("%s, raised to min %d", why, d.p.Min)
	case want > d.p.Max:
		return d.p.Max, fmt.Sprintf("%s, capped at max %d", why, d.p.Max)
	}
	return want, why
}

// bounded words a move from n to want.
func bounded(n, want int, why string) string {
	if want == n {
		return fmt.Sprintf("%s; keeping %d", why, n)
	}
	return fmt.Sprintf("%s; %d→%d", why, n, want)
}

// record adds a want to the sliding maximum over ScaleDownDelay.
func (d *Decider) record(now time.Time, want int) {
	from := now.Add(-d.p.ScaleDownDelay)
	i := 0
	for i < len(d.wants) && !d.wants[i].at.After(from) {
		i++
	}
	d.wants = d.wants[i:]
	for len(d.wants) > 0 && d.wants[len(d.wants)-1].want <= want {
		d.wants = d.wants[:len(d.wants)-1]
	}
	d.wants = append(d.wants, stamped{now, want})
}

// recentMax is the highest want recorded in the last ScaleDownDelay; record
// has just pruned older wants and added the newest.
func (d *Decider) recentMax() int { return d.wants[0].want }
