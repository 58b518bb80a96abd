package fastcontainer

import (
	"fmt"
	"math"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// reaction is what shoal did during a run's load, in s after ab started
// (NaN: not during the load).
type reaction struct {
	up    float64 // the first raise of a replica's CPU quota (a cpu event)
	upTo  float64 // the quota it was raised to
	out   float64 // the first scale-out decision (a scale event to more replicas)
	ready float64 // the first status sample with two ready replicas
	ups   int     // cpu events raising a quota
	downs int     // cpu events lowering one
	held  float64 // the share of ready replicas' samples at maxCPU
}

// analyze reads a run's events and status samples from launch to end s
// after it.
func analyze(launch time.Time, end float64, events []types.Event, samples []kit.AppSample, maxCPU float64) reaction {
	r := reaction{up: math.NaN(), upTo: math.NaN(), out: math.NaN(), ready: math.NaN(), held: math.NaN()}
	during := func(t time.Time) (float64, bool) {
		s := t.Sub(launch).Seconds()
		return s, s >= 0 && s <= end
	}
	for _, ev := range events {
		s, ok := during(ev.Time)
		if !ok {
			continue
		}
		switch ev.Kind {
		case "cpu":
			from, to := ev.Inputs["from"], ev.Inputs["to"]
			switch {
			case to > from:
				r.ups++
				if math.IsNaN(r.up) {
					r.up, r.upTo = s, to
				}
			case to < from:
				r.downs++
			}
		case "scale":
			var from, to int
			if n, _ := fmt.Sscanf(ev.Reason, "%d → %d replicas", &from, &to); n == 2 && to > from && from > 0 && math.IsNaN(r.out) {
				r.out = s
			}
		}
	}
	var at, all int
	for _, smp := range samples {
		s, ok := during(smp.T)
		if !ok {
			continue
		}
		if smp.Ready >= 2 && math.IsNaN(r.ready) {
			r.ready = s
		}
		for _, c := range smp.CPUs {
			all++
			if c >= maxCPU-0.005 {
				at++
			}
		}
	}
	if all > 0 {
		r.held = float64(at) / float64(all)
	}
	return r
}

// between returns the total times (ms) of the requests that surely
// started in [from, to) s after launch. ab stamps a request's start in
// whole seconds, so a request counts only when its whole second lies in
// the window (the part before launch aside).
func between(r kit.ABRun, launch time.Time, from, to float64) []float64 {
	off := r.Begin.Sub(launch).Seconds()
	var out []float64
	for i, s := range r.Starts {
		lo, hi := math.Max(s+off, 0), s+off+1
		if lo >= from && hi <= to {
			out = append(out, r.TTimes[i])
		}
	}
	return out
}

// firstOf is the earlier of two times, either of which may be NaN (not
// reached); NaN when neither was.
func firstOf(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	default:
		return math.Min(a, b)
	}
}

// quotaPerSecond returns, for each second since launch, the mean CPU quota
// of the ready replicas and the most ready replicas seen in it.
func quotaPerSecond(launch time.Time, samples []kit.AppSample, secs int) (quota, ready []float64) {
	sum, n := make([]float64, secs), make([]int, secs)
	ready = make([]float64, secs)
	for k := range ready {
		ready[k] = math.NaN()
	}
	for _, smp := range samples {
		k := int(math.Floor(smp.T.Sub(launch).Seconds()))
		if k < 0 || k >= secs {
			continue
		}
		for _, c := range smp.CPUs {
			sum[k] += c
			n[k]++
		}
		if math.IsNaN(ready[k]) || float64(smp.Ready) > ready[k] {
			ready[k] = float64(smp.Ready)
		}
	}
	quota = make([]float64, secs)
	for k := range quota {
		quota[k] = math.NaN()
		if n[k] > 0 {
			quota[k] = sum[k] / float64(n[k])
		}
	}
	return quota, ready
}
