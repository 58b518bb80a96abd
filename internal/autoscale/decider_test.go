package autoscale

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rig drives a Decider the way the controller does: a sample every 100 ms, a
// decision every second, and the decided count applied at once.
type rig struct {
	t   *testing.T
	c   *clock.Fake
	d   *Decider
	n   int
	log []Decision
}

func newRig(t *testing.T, p Policy, n int) *rig {
	t.Helper()
	c := clock.NewFake(t0)
	d, err := New(p, c)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, c: c, d: d, n: n}
}

// run feeds conc for dur and returns the decisions made meanwhile.
func (r *rig) run(dur time.Duration, conc float64) []Decision {
	var out []Decision
	for i := 1; i <= int(dur/(100*time.Millisecond)); i++ {
		r.c.Advance(100 * time.Millisecond)
		r.d.Observe(Sample{Concurrency: conc})
		if i%10 == 0 {
			dec := r.d.Decide(Current{Replicas: r.n})
			if dec.Reason == "" || dec.Inputs == nil {
				r.t.Fatalf("decision without reason or inputs: %+v", dec)
			}
			r.n = dec.Replicas
			out = append(out, dec)
		}
	}
	r.log = append(r.log, out...)
	return out
}

type phase struct {
	dur  time.Duration
	conc float64
	want int // replicas after the phase
}

func TestSeries(t *testing.T) {
	base := Policy{Min: 0, Max: 10, TargetConcurrency: 10}
	withMin := base
	withMin.Min = 2
	cases := []struct {
		name   string
		p      Policy
		start  int
		phases []phase
		// every, when set, must hold for every decision.
		every func(Decision) bool
	}{
		{"steady load at target stays", base, 3,
			[]phase{{30 * time.Second, 30, 3}},
			func(d Decision) bool { return d.Replicas == 3 && !d.Panic }},
		{"steady load between multiples stays", base, 3,
			[]phase{{30 * time.Second, 25, 3}}, nil},
		{"gentle growth scales up without panic", base, 4,
			[]phase{{5 * time.Second, 40, 4}, {20 * time.Second, 60, 6}},
			func(d Decision) bool { return !d.Panic }},
		{"zero traffic with min 0 goes to 0", base, 4,
			[]phase{{60 * time.Second, 0, 0}}, nil},
		{"zero traffic with min 2 stays at 2", withMin, 4,
			[]phase{{60 * time.Second, 0, 2}}, nil},
		{"min raises a count below it", withMin, 0,
			[]phase{{2 * time.Second, 0, 2}}, nil},
		{"max caps a flood", base, 1,
			[]phase{{5 * time.Second, 1000, 10}},
			func(d Decision) bool { return d.Replicas <= 10 }},
		{"from zero a single request wakes one", base, 0,
			[]phase{{2 * time.Second, 1, 1}}, nil},
		{"zero stays zero without traffic", base, 0,
			[]phase{{30 * time.Second, 0, 0}},
			func(d Decision) bool { return d.Replicas == 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.p, tc.start)
			for i, ph := range tc.phases {
				r.run(ph.dur, ph.conc)
				if r.n != ph.want {
					t.Fatalf("after phase %d: %d replicas, want %d; last reason: %s", i, r.n, ph.want, r.log[len(r.log)-1].Reason)
				}
			}
			for _, d := range r.log {
				if tc.every != nil && !tc.every(d) {
					t.Fatalf("decision at %s broke the rule: %+v", d.At.Sub(t0), d)
				}
			}
		})
	}
}

func TestStepUpPanicsWithinASecond(t *testing.T) {
	r := newRig(t, Policy{Max: 20, TargetConcurrency: 10}, 1)
	r.run(5*time.Second, 10)
	if r.n != 1 {
		t.Fatalf("steady 10 at target 10: %d replicas", r.n)
	}
	decs := r.run(time.Second, 80)
	d := decs[0]
	if !d.Panic || d.Replicas != 8 {
		t.Fatalf("one second of 80 in flight: %+v", d)
	}
	if !strings.Contains(d.Reason, "panic: 1s concurrency 80.0 is 8.0x") || d.Inputs["panic_concurrency"] != 80 {
		t.Fatalf("reason or inputs do not say why: %q %v", d.Reason, d.Inputs)
	}
}

func TestSpikeThenQuiet(t *testing.T) {
	p := Policy{Max: 20, TargetConcurrency: 10}.WithDefaults()
	r := newRig(t, p, 1)
	r.run(2*time.Second, 160)
	if r.n != 16 || !r.log[len(r.log)-1].Panic {
		t.Fatalf("spike: %d replicas, %+v", r.n, r.log[len(r.log)-1])
	}
	r.run(60*time.Second, 0)
	if r.n != 0 {
		t.Fatalf("a minute of quiet left %d replicas: %s", r.n, r.log[len(r.log)-1].Reason)
	}
	var panicEnd, lastDown time.Time
	prev := 1
	for _, d := range r.log {
		if d.Panic {
			if d.Replicas < prev {
				t.Fatalf("scaled down in panic at %s: %d→%d", d.At.Sub(t0), prev, d.Replicas)
			}
			panicEnd = d.At
		}
		if d.Replicas < prev {
			if d.At.Sub(panicEnd) < p.ScaleDownDelay {
				t.Fatalf("scaled down %s after panic, before the %s delay", d.At.Sub(panicEnd), p.ScaleDownDelay)
			}
			if !lastDown.IsZero() && d.At.Sub(lastDown) < p.ScaleDownDelay {
				t.Fatalf("two scale-down steps %s apart", d.At.Sub(lastDown))
			}
			if floor := (prev + 1) / 2; d.Replicas < floor && !(prev == 1 && d.Replicas == 0) {
				t.Fatalf("scaled %d→%d, more than halving", prev, d.Replicas)
			}
			lastDown = d.At
		}
		prev = d.Replicas
	}
	// The threshold was crossed only by the first decision (at 1s; at 2s the
	// 16 replicas were enough), and the panic lasts a stable window after it.
	if got := panicEnd.Sub(t0); got != p.StableWindow {
		t.Fatalf("last panic decision at %s, want %s", got, p.StableWindow)
	}
}

func TestTrickleOfShortRequestsKeepsOne(t *testing.T) {
	r := newRig(t, Policy{}, 1)
	for i := 0; i < 600; i++ {
		r.c.Advance(100 * time.Millisecond)
		s := Sample{}
		if i%10 == 0 {
			s.Requests = 1 // finished before any sample saw it in flight
		}
		r.d.Observe(s)
		if i%10 == 9 {
			if d := r.d.Decide(Current{Replicas: r.n}); d.Replicas != 1 {
				t.Fatalf("at %s: %d replicas: %s", d.At.Sub(t0), d.Replicas, d.Reason)
			}
		}
	}
}

func TestZeroNeedsAFullWindow(t *testing.T) {
	r := newRig(t, Policy{}, 2)
	r.run(8*time.Second, 0)
	if r.n == 0 {
		t.Fatalf("went to zero after 8s of samples with a 10s window")
	}
	r.run(30*time.Second, 0)
	if r.n != 0 {
		t.Fatalf("still %d after 38s without traffic", r.n)
	}
}

func TestNoSamplesKeepsCurrent(t *testing.T) {
	c := clock.NewFake(t0)
	d, err := New(Policy{Min: 1, Max: 5}, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ n, want int }{{3, 3}, {0, 1}, {9, 5}} {
		dec := d.Decide(Current{Replicas: tc.n})
		if dec.Replicas != tc.want || !strings.Contains(dec.Reason, "no samples yet") {
			t.Fatalf("no samples, %d running: %+v", tc.n, dec)
		}
	}
	d.Observe(Sample{Concurrency: 50})
	c.Advance(time.Minute)
	dec := d.Decide(Current{Replicas: 3})
	if dec.Replicas != 3 || !strings.Contains(dec.Reason, "no samples in the last") {
		t.Fatalf("samples stopped a minute ago: %+v", dec)
	}
}

func TestSamplesAreBoundedAndOrdered(t *testing.T) {
	r := newRig(t, Policy{}, 1)
	r.run(60*time.Second, 5)
	if n := len(r.d.samples); n > 100 {
		t.Fatalf("%d samples kept for a 10s window at 100ms", n)
	}
	last := r.d.samples[len(r.d.samples)-1]
	r.d.Observe(Sample{At: last.At.Add(-time.Second), Concurrency: 999})
	if r.d.samples[len(r.d.samples)-1] != last {
		t.Fatal("a sample older than the last was kept")
	}
}

func TestSetPolicyKeepsHistory(t *testing.T) {
	r := newRig(t, Policy{Max: 10}, 1)
	r.run(5*time.Second, 60)
	if err := r.d.SetPolicy(Policy{Max: 3}); err != nil {
		t.Fatal(err)
	}
	if d := r.d.Decide(Current{Replicas: r.n}); d.Replicas != 3 || !strings.Contains(d.Reason, "max 3") {
		t.Fatalf("after max lowered to 3: %+v", d)
	}
	if err := r.d.SetPolicy(Policy{Min: 4, Max: 3}); err == nil {
		t.Fatal("SetPolicy took min above max")
	}
}

func TestConcurrentUse(t *testing.T) {
	d, err := New(Policy{}, clock.NewFake(t0))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 500; i++ {
			d.Observe(Sample{Concurrency: float64(i % 30)})
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 500; i++ {
			d.Decide(Current{Replicas: 2, CPU: []ReplicaCPU{{ID: "a", Periods: uint64(i), Throttled: uint64(i)}}})
		}
	}()
	wg.Wait()
}
