package autoscale

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// replica is a replica whose cumulative CFS counters a test moves on.
type replica struct {
	id                 string
	quota              float64
	periods, throttled uint64
}

// tick adds periods, throttled in the given fraction.
func (r *replica) tick(periods uint64, frac float64) {
	r.periods += periods
	r.throttled += uint64(float64(periods)*frac + 0.5)
}

func (r *replica) cpu() ReplicaCPU {
	return ReplicaCPU{ID: r.id, Quota: r.quota, Periods: r.periods, Throttled: r.throttled}
}

// decideCPU advances the clock by a second and decides for the replicas,
// applying the quota changes it returns.
func decideCPU(c *clock.Fake, d *Decider, n int, rs ...*replica) Decision {
	c.Advance(time.Second)
	cur := Current{Replicas: n}
	for _, r := range rs {
		cur.CPU = append(cur.CPU, r.cpu())
	}
	dec := d.Decide(cur)
	for _, r := range rs {
		if q, ok := dec.CPU[r.id]; ok {
			r.quota = q
		}
	}
	return dec
}

func TestThrottling(t *testing.T) {
	vertical := Policy{CPU: 0.5, MaxCPU: 2}
	cases := []struct {
		name  string
		p     Policy
		quota float64
		// each step: periods run in the second and the throttled fraction.
		steps  [][2]float64
		quotas []float64 // quota after each step (the first sets the baseline)
	}{
		{"throttled steps up to the ceiling", vertical, 0.5,
			[][2]float64{{0, 0}, {10, 0.9}, {10, 0.8}, {10, 1}, {10, 0.95}},
			[]float64{0.5, 1, 2, 2, 2}},
		{"zero quota means the base", vertical, 0,
			[][2]float64{{0, 0}, {10, 0.9}},
			[]float64{0, 1}},
		{"between the thresholds holds", vertical, 1,
			[][2]float64{{0, 0}, {10, 0.5}, {10, 0.1}, {10, 0.7}},
			[]float64{1, 1, 1, 1}},
		{"under 10% goes half way back to the base", vertical, 2,
			[][2]float64{{0, 0}, {10, 0}, {20, 0.05}, {10, 0}, {10, 0}, {10, 0}, {10, 0}},
			[]float64{2, 1.25, 0.88, 0.69, 0.6, 0.55, 0.5}},
		{"too few periods to judge", vertical, 0.5,
			[][2]float64{{0, 0}, {2, 1}, {2, 1}, {2, 1}},
			[]float64{0.5, 0.5, 0.5, 1}},
		{"vertical off leaves quotas", Policy{CPU: 0.5}, 0.5,
			[][2]float64{{0, 0}, {10, 1}, {10, 0}},
			[]float64{0.5, 0.5, 0.5}},
		{"quota above the ceiling is brought down", vertical, 3,
			[][2]float64{{0, 0}},
			[]float64{2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clock.NewFake(t0)
			d, err := New(tc.p, c)
			if err != nil {
				t.Fatal(err)
			}
			r := &replica{id: "r1", quota: tc.quota, periods: 1000, throttled: 100}
			for i, s := range tc.steps {
				r.tick(uint64(s[0]), s[1])
				dec := decideCPU(c, d, 1, r)
				if r.quota != tc.quotas[i] {
					t.Fatalf("step %d: quota %g, want %g: %s", i, r.quota, tc.quotas[i], dec.Reason)
				}
				if _, changed := dec.CPU["r1"]; changed && !strings.Contains(dec.Reason, "replica r1") {
					t.Fatalf("step %d: a quota change the reason does not name: %s", i, dec.Reason)
				}
			}
		})
	}
}

func TestIdleReplicaReturnsToBase(t *testing.T) {
	c := clock.NewFake(t0)
	d, err := New(Policy{CPU: 0.5, MaxCPU: 2}, c)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: "r1", quota: 2, periods: 500, throttled: 400}
	decideCPU(c, d, 1, r)
	for i := 1; i < 10; i++ {
		r.tick(0, 0)
		if dec := decideCPU(c, d, 1, r); dec.CPU != nil {
			t.Fatalf("after %ds idle, before a stable window: %v", i, dec.CPU)
		}
	}
	dec := decideCPU(c, d, 1, r)
	if r.quota != 0.5 || !strings.Contains(dec.Reason, "idle") {
		t.Fatalf("after a stable window idle: quota %g: %s", r.quota, dec.Reason)
	}
}

func TestCounterResetAndForgottenReplicas(t *testing.T) {
	c := clock.NewFake(t0)
	d, err := New(Policy{CPU: 0.5, MaxCPU: 2}, c)
	if err != nil {
		t.Fatal(err)
	}
	a := &replica{id: "a", quota: 0.5, periods: 5000, throttled: 4000}
	b := &replica{id: "b", quota: 0.5, periods: 100, throttled: 0}
	decideCPU(c, d, 2, a, b)

	// a's cgroup was made anew: its counters went backwards. That is a new
	// baseline, not a huge or negative delta.
	a.periods, a.throttled = 10, 10
	b.tick(10, 0.9)
	dec := decideCPU(c, d, 2, a, b)
	if _, ok := dec.CPU["a"]; ok || b.quota != 1 {
		t.Fatalf("after a's reset: %v", dec.CPU)
	}
	a.tick(10, 0.9)
	if decideCPU(c, d, 2, a, b); a.quota != 1 {
		t.Fatalf("a throttled after its reset: quota %g", a.quota)
	}

	// b goes away and is forgotten; a new b with higher counters is new.
	decideCPU(c, d, 1, a)
	if _, ok := d.cpu["b"]; ok {
		t.Fatal("b is still tracked after it left")
	}
	b.tick(1000, 1)
	if dec := decideCPU(c, d, 2, a, b); dec.CPU["b"] != 0 {
		t.Fatalf("b came back and was judged on old counters: %v", dec.CPU)
	}
}

func TestSaturatedReplicasScaleOut(t *testing.T) {
	cases := []struct {
		name string
		p    Policy
		conc float64
		want int
	}{
		// Two replicas at their ceiling with 15 requests in flight: target
		// 10 wants 2, CPU wants one more.
		{"at the ceiling adds one", Policy{CPU: 1, MaxCPU: 1}, 15, 3},
		{"no vertical scaling: the base is the ceiling", Policy{CPU: 1}, 15, 3},
		// One request per replica: more replicas would not help.
		{"nothing to spread stays", Policy{CPU: 1}, 2, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clock.NewFake(t0)
			d, err := New(tc.p, c)
			if err != nil {
				t.Fatal(err)
			}
			a := &replica{id: "a", quota: 1}
			b := &replica{id: "b", quota: 1}
			d.Observe(Sample{Concurrency: tc.conc})
			decideCPU(c, d, 2, a, b)
			for i := 0; i < 10; i++ {
				c.Advance(100 * time.Millisecond)
				d.Observe(Sample{Concurrency: tc.conc})
			}
			a.tick(10, 0.9)
			b.tick(10, 0.9)
			dec := decideCPU(c, d, 2, a, b)
			if dec.Replicas != tc.want || dec.CPU != nil {
				t.Fatalf("%+v", dec)
			}
			if tc.want == 3 && (!strings.Contains(dec.Reason, "CPU ceiling") || dec.Inputs["saturated_replicas"] != 2) {
				t.Fatalf("reason does not say why: %s %v", dec.Reason, dec.Inputs)
			}
		})
	}
}

// A raised quota is lowered only after cpuLowerAfter without demand:
// neither throttled nor busyInFlight requests in flight. A replica starved
// of CPU by its neighbours is not throttled while 50 requests wait on it;
// it kept its raised quota for under 2 s before (the quota swung 0.3 →
// 0.6 → 0.3 under load).
func TestCPUHysteresis(t *testing.T) {
	cases := []struct {
		name     string
		inFlight []int // requests in flight at each step after the raise
		lowerAt  int   // the step (from 1) whose decision lowers the quota; 0: none
	}{
		{"in flight holds the quota", []int{50, 80, 50, 60, 70, 50, 90, 50, 60, 50, 50, 70, 50, 50, 50}, 0},
		{"one request in flight is no demand", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 10},
		{"lowered after the hold once the requests end", []int{50, 50, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 13},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clock.NewFake(t0)
			d, err := New(Policy{CPU: 0.3, MaxCPU: 0.6}, c)
			if err != nil {
				t.Fatal(err)
			}
			r := &replica{id: "r1", quota: 0.3, periods: 1000}
			decideCPU(c, d, 1, r)
			r.tick(10, 0.9)
			decideCPU(c, d, 1, r)
			if r.quota != 0.6 {
				t.Fatalf("throttled in 90%% of its periods: quota %g, want 0.6", r.quota)
			}
			for i, n := range tc.inFlight {
				r.tick(10, 0)
				cur := Current{Replicas: 1, CPU: []ReplicaCPU{{ID: r.id, Quota: r.quota, Periods: r.periods, Throttled: r.throttled, InFlight: n}}}
				c.Advance(time.Second)
				dec := d.Decide(cur)
				q, lowered := dec.CPU[r.id]
				switch {
				case lowered && i+1 != tc.lowerAt:
					t.Fatalf("step %d (%d in flight): quota lowered to %g, want it lowered at step %d: %s", i+1, n, q, tc.lowerAt, dec.Reason)
				case !lowered && i+1 == tc.lowerAt:
					t.Fatalf("step %d: quota not lowered: %s", i+1, dec.Reason)
				case lowered:
					return
				}
			}
		})
	}
}

// A replica with requests waiting on it asks for more CPU when it used
// nearly all its quota, or most of it while its tasks waited for a CPU
// most of the time (PSI, where its cgroup tells), though it was not
// throttled in 80% of its periods: the quota followed throttling alone
// before, and a replica at 50-100 requests in flight using all of its 0.3
// cores was left there ("throttled in 0% of 5 periods"). Waiting for a
// CPU while using half its quota or less is contention on the host, not
// at the quota: no raise.
func TestCPURaisedOnDemand(t *testing.T) {
	type step struct {
		inFlight  int
		used      float64 // cores used over the second
		throttled float64 // fraction of its 10 periods
		stalled   float64 // fraction of the second some task waited; <0: no PSI
	}
	cases := []struct {
		name   string
		quota  float64
		step   step
		want   float64 // quota after the step
		reason string  // in the decision's reason
	}{
		{"at its quota, never throttled", 0.3, step{60, 0.3, 0, -1}, 0.6, "used 100% of its 0.3 cpu with 60 requests in flight, throttled in 0% of 10 periods: cpu 0.3→0.6"},
		{"near its quota, throttled in a third", 0.3, step{50, 0.28, 0.3, -1}, 0.6, "used 93% of its 0.3 cpu"},
		{"below its quota: starved by its neighbours", 0.3, step{80, 0.15, 0, -1}, 0.3, ""},
		{"at its quota with one request", 0.3, step{1, 0.3, 0, -1}, 0.3, ""},
		{"most of its quota, waiting for a CPU most of the time", 0.3, step{60, 0.22, 0, 0.7}, 0.6, "used 73% of its 0.3 cpu and waited for a CPU 70% of the time"},
		{"waiting for a CPU, starved by a busy host", 0.3, step{60, 0.15, 0, 0.7}, 0.3, ""},
		{"under half its quota, waiting for a CPU", 0.3, step{2, 0.135, 0, 0.6}, 0.3, ""},
		{"hardly waiting for a CPU", 0.3, step{60, 0.15, 0, 0.1}, 0.3, ""},
		{"at its ceiling", 0.6, step{60, 0.6, 0, -1}, 0.6, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clock.NewFake(t0)
			d, err := New(Policy{CPU: 0.3, MaxCPU: 0.6}, c)
			if err != nil {
				t.Fatal(err)
			}
			r := ReplicaCPU{ID: "r1", Quota: tc.quota, Periods: 1000, Used: time.Minute, Stalled: time.Minute, Pressure: tc.step.stalled >= 0}
			c.Advance(time.Second)
			d.Decide(Current{Replicas: 1, CPU: []ReplicaCPU{r}})
			s := tc.step
			r.Periods += 10
			r.Throttled += uint64(10*s.throttled + 0.5)
			r.Used += time.Duration(s.used * float64(time.Second))
			r.Stalled += time.Duration(max(s.stalled, 0) * float64(time.Second))
			r.InFlight = s.inFlight
			c.Advance(time.Second)
			dec := d.Decide(Current{Replicas: 1, CPU: []ReplicaCPU{r}})
			q, ok := dec.CPU["r1"]
			if !ok {
				q = tc.quota
			}
			if q != tc.want || (tc.reason == "") != !strings.Contains(dec.Reason, "requests in flight") || !strings.Contains(dec.Reason, tc.reason) {
				t.Fatalf("quota %g, want %g; reason %q, want it to say %q", q, tc.want, dec.Reason, tc.reason)
			}
		})
	}
}

// A quota raised on demand is held while the demand lasts and lowered
// only cpuLowerAfter after it ends, as one raised for throttling is; the
// share of its quota a replica used is measured between the readings of
// its counters, not between verdicts.
func TestCPUDemandHeldThenLowered(t *testing.T) {
	c := clock.NewFake(t0)
	d, err := New(Policy{CPU: 0.3, MaxCPU: 0.6}, c)
	if err != nil {
		t.Fatal(err)
	}
	r := ReplicaCPU{ID: "r1", Quota: 0.3, Periods: 1000, Used: time.Minute}
	var changes []float64
	run := func(secs int, inFlight int, cores float64) {
		for range secs {
			c.Advance(time.Second)
			r.Periods += 10
			r.Used += time.Duration(cores * float64(time.Second))
			r.InFlight = inFlight
			r.At = c.Now()
			dec := d.Decide(Current{Replicas: 1, CPU: []ReplicaCPU{r}})
			if q, ok := dec.CPU["r1"]; ok {
				r.Quota = q
				changes = append(changes, q)
			}
		}
	}
	run(1, 0, 0)
	run(3, 60, 0.3) // at its quota: raised
	run(5, 60, 0.4) // two thirds of its new quota: held
	run(9, 0, 0.01) // the requests ended: held for 10 s
	if want := []float64{0.6}; !slices.Equal(changes, want) {
		t.Fatalf("quota changes %v, want %v", changes, want)
	}
	run(1, 0, 0.01) // 10 s without demand: half way back
	if want := []float64{0.6, 0.45}; !slices.Equal(changes, want) {
		t.Fatalf("quota changes %v, want %v", changes, want)
	}
	// A reading a second older than the verdict: the CPU time used is
	// judged over the span between the readings.
	run(1, 60, 0.1)
	c.Advance(2 * time.Second)
	r.Periods += 20
	r.Used += 450 * time.Millisecond // 0.225 cores over the 2 s between the verdicts
	r.At = c.Now().Add(-time.Second) // but read a second ago: 0.45 cores over 1 s
	if dec := d.Decide(Current{Replicas: 1, CPU: []ReplicaCPU{r}}); dec.CPU != nil {
		// Over the 1 s between the readings it used all of its 0.45 cores.
		if !strings.Contains(dec.Reason, "used 100%") {
			t.Fatalf("a stale reading judged against the verdicts' span: %s", dec.Reason)
		}
	} else {
		t.Fatalf("used its whole quota between readings a second apart, not raised")
	}
}

// Demand without throttling at the ceiling is no cause to scale out: two
// replicas using all their CPU, waiting for a CPU most of the time, with
// 15 requests to spread stay two at target 10 (a replica waiting for CPUs
// the host's other work holds would not be helped by another beside it).
func TestCPUDemandAtCeilingDoesNotScaleOut(t *testing.T) {
	c := clock.NewFake(t0)
	d, err := New(Policy{CPU: 1, MaxCPU: 1}, c)
	if err != nil {
		t.Fatal(err)
	}
	rs := []ReplicaCPU{{ID: "a", Quota: 1, Pressure: true}, {ID: "b", Quota: 1, Pressure: true}}
	for i := 0; i < 10; i++ {
		c.Advance(100 * time.Millisecond)
		d.Observe(Sample{Concurrency: 15})
		if i == 0 || i == 9 {
			for j := range rs {
				if i == 9 {
					rs[j].Periods += 10
					rs[j].Used += 900 * time.Millisecond
					rs[j].Stalled += 800 * time.Millisecond
					rs[j].InFlight = 8
				}
			}
			dec := d.Decide(Current{Replicas: 2, CPU: rs})
			if dec.Replicas != 2 || dec.CPU != nil {
				t.Fatalf("step %d: %+v", i, dec)
			}
		}
	}
}
