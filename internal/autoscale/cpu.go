package autoscale

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// minPeriods is how many CFS periods with work a replica needs since its last
// verdict before its throttling is judged: half a second of work at the
// kernel's default 100 ms period.
const minPeriods = 5

// cpuLowerAfter is how long a replica whose quota was raised must show
// no demand for CPU before its quota is lowered: raised at once when
// throttled, lowered only after sustained low demand, so that a loaded
// replica's quota does not swing back and forth.
const cpuLowerAfter = 10 * time.Second

// busyInFlight is how many requests in flight on a replica count as
// demand for its CPU although it is not throttled: a replica starved by
// its neighbours on a busy CPU cannot use its quota, so it is not
// throttled, yet lowering its quota would slow it further.
const busyInFlight = 2

// cpuUsedHigh is the share of its quota a replica must have used since
// its last verdict for busyInFlight requests waiting on it to ask for more
// CPU although it was not throttled in ThrottleHigh of its periods: a
// replica whose work comes in bursts just short of its quota, or which
// hits it in a third of its periods, serves its queue no faster for being
// held there.
const cpuUsedHigh = 0.9

// cpuStallHigh is the share of the time since its last verdict in which
// some task of a replica waited for a CPU (its cgroup's PSI "some", where
// the kernel tells) for busyInFlight requests waiting on it to ask for
// more CPU, provided it also used cpuUsedStalled of its quota: its work
// waits for a CPU near its quota, and a higher quota lets it catch up as
// soon as one frees. Stall alone is no demand for quota: a replica
// starved by a busy host waits as long while using little of its quota,
// and a higher one it could not use would only be taken from the others.
const cpuStallHigh = 0.5

// cpuUsedStalled is the share of its quota a replica stalled in
// cpuStallHigh of the time must have used to ask for more.
const cpuUsedStalled = 0.7

// cpuState is one replica's counters at its last verdict.
type cpuState struct {
	periods, throttled uint64
	used, stalled      time.Duration
	read               time.Time // when those counters were read
	at                 time.Time
	// saturated: throttled at or above ThrottleHigh at its ceiling.
	saturated bool
	// demand is when the replica last showed demand for CPU: throttled
	// at or above ThrottleHigh, or busyInFlight requests in flight.
	demand time.Time
}

// decideCPU judges each replica's throttling, puts quota changes in dec.CPU,
// forgets replicas that are gone, and returns notes for the reason and how
// many replicas are saturated at their ceiling.
func (d *Decider) decideCPU(now time.Time, cur Current, dec *Decision) (notes []string, saturated int) {
	p := d.p
	seen := make(map[string]bool, len(cur.CPU))
	throttled := 0
	for _, r := range cur.CPU {
		if r.ID == "" || seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		quota := r.Quota
		if quota <= 0 {
			quota = p.CPU
		}
		if hi := max(p.MaxCPU, p.CPU); p.CPU > 0 && (quota < p.CPU || quota > hi) {
			next := min(max(quota, p.CPU), hi)
			d.setCPU(dec, r.ID, next, -1)
			notes = append(notes, fmt.Sprintf("replica %s cpu %g is outside the policy's %g..%g: cpu %g→%g", r.ID, quota, p.CPU, hi, quota, next))
			quota = next
		}
		read := r.At
		if read.IsZero() {
			read = now
		}
		st, ok := d.cpu[r.ID]
		if !ok || r.Periods < st.periods || r.Throttled < st.throttled || r.Used < st.used || r.Stalled < st.stalled {
			// First sight, or a new cgroup under the same id: only a baseline.
			d.cpu[r.ID] = &cpuState{periods: r.Periods, throttled: r.Throttled, used: r.Used, stalled: r.Stalled, read: read, at: now}
			continue
		}
		if r.InFlight >= busyInFlight {
			st.demand = now
		}
		dp := r.Periods - st.periods
		dt := min(r.Throttled-st.throttled, dp)
		idle := dp < minPeriods
		if idle && now.Sub(st.at) < p.StableWindow {
			if st.saturated {
				saturated++
			}
			continue // not enough work yet to judge
		}
		ratio := 0.0
		if dp > 0 {
			ratio = float64(dt) / float64(dp)
		}
		held := now.Sub(st.at)
		used, stalled := -1.0, -1.0 // unknown
		if span := read.Sub(st.read); span > 0 {
			if r.Used > 0 && quota > 0 {
				used = float64(r.Used-st.used) / (float64(span) * quota)
			}
			if r.Pressure {
				stalled = float64(r.Stalled-st.stalled) / float64(span)
			}
		}
		*st = cpuState{periods: r.Periods, throttled: r.Throttled, used: r.Used, stalled: r.Stalled, read: read, at: now, demand: st.demand}
		// wants: requests wait on a replica that uses nearly all its
		// quota, or most of it while its tasks wait for a CPU, though it
		// was not throttled in ThrottleHigh of its periods.
		wants := !idle && r.InFlight >= busyInFlight && (used >= cpuUsedHigh || (used >= cpuUsedStalled && stalled >= cpuStallHigh))
		var demand string
		if wants && p.vertical() && quota < p.MaxCPU {
			var saw []string
			if used >= 0 {
				saw = append(saw, fmt.Sprintf("used %.0f%% of its %g cpu", used*100, quota))
				dec.Inputs["used/"+r.ID] = used
			}
			if stalled >= 0 {
				saw = append(saw, fmt.Sprintf("waited for a CPU %.0f%% of the time", stalled*100))
				dec.Inputs["stalled/"+r.ID] = stalled
			}
			demand = fmt.Sprintf("%s with %d requests in flight, throttled in %.0f%% of %d periods", strings.Join(saw, " and "), r.InFlight, ratio*100, dp)
		}
		switch {
		case !idle && ratio >= p.ThrottleHigh:
			st.demand = now
			throttled++
			if p.vertical() && quota < p.MaxCPU {
				next := min(round2(quota*2), p.MaxCPU)
				d.setCPU(dec, r.ID, next, ratio)
				notes = append(notes, fmt.Sprintf("replica %s throttled in %.0f%% of %d periods: cpu %g→%g", r.ID, ratio*100, dp, quota, next))
				break
			}
			if quota > 0 {
				st.saturated = true
				saturated++
				dec.Inputs["throttled/"+r.ID] = ratio
				notes = append(notes, fmt.Sprintf("replica %s throttled in %.0f%% of %d periods at its ceiling of %g cpu", r.ID, ratio*100, dp, quota))
			}
		case wants && p.vertical() && quota < p.MaxCPU:
			// Not below its ceiling, it is no cause to scale out: a
			// replica waiting for a CPU the host's other work holds
			// would not be helped by another beside it.
			st.demand = now
			next := min(round2(quota*2), p.MaxCPU)
			d.setCPU(dec, r.ID, next, ratio)
			notes = append(notes, fmt.Sprintf("replica %s %s: cpu %g→%g", r.ID, demand, quota, next))
		case p.vertical() && quota > p.CPU && (idle || ratio < p.ThrottleLow) && now.Sub(st.demand) >= cpuLowerAfter:
			next := p.CPU
			why := fmt.Sprintf("idle (%d periods in %s)", dp, held.Round(time.Millisecond))
			if !idle {
				next = lower(quota, p.CPU)
				why = fmt.Sprintf("throttled in %.0f%% of %d periods", ratio*100, dp)
			}
			d.setCPU(dec, r.ID, next, ratio)
			notes = append(notes, fmt.Sprintf("replica %s %s: cpu %g→%g", r.ID, why, quota, next))
		}
	}
	for id := range d.cpu {
		if !seen[id] {
			delete(d.cpu, id)
		}
	}
	dec.Inputs["throttled_replicas"] = float64(throttled)
	sort.Strings(notes)
	return notes, saturated
}

// setCPU records a quota change and, when it was judged from throttling
// (ratio >= 0), the throttled fraction as input "throttled/<id>".
func (d *Decider) setCPU(dec *Decision, id string, quota, ratio float64) {
	if dec.CPU == nil {
		dec.CPU = map[string]float64{}
	}
	dec.CPU[id] = quota
	if ratio >= 0 {
		dec.Inputs["throttled/"+id] = ratio
	}
}

// lower moves quota half way back to base, snapping to base when the rest is
// under a tenth of base or a hundredth of a core.
func lower(quota, base float64) float64 {
	next := round2(base + (quota-base)/2)
	if next-base < max(base/10, 0.01) {
		return base
	}
	return next
}

// round2 rounds cores to hundredths, the grain of a 1 ms quota per 100 ms.
func round2(c float64) float64 { return math.Round(c*100) / 100 }
