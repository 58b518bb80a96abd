package autoscale

import (
	"testing"
	"time"
)

// The decider's count never bounces back up while the count it stepped
// down to is still being reached: the controller keeps the last replica
// of an idle app ready until idle_timeout, and drains replicas over
// seconds, so the count lags the decision. Deciding every 100 ms (as the
// controller does) on the fake clock, with the count following each
// decision after lag (forever: never), a decision rises only when traffic
// comes back.
func TestHysteresisOnALaggingCount(t *testing.T) {
	const never = time.Hour
	for _, tc := range []struct {
		name  string
		n     int
		lag   time.Duration
		conc  []float64 // per 10 s, in turn
		rises int       // decisions above the one before
		final int
	}{
		{"the last replica waits for idle_timeout", 1, never, []float64{0, 0, 0, 0, 0, 0}, 0, 0},
		{"scale-in drains slowly", 4, 3 * time.Second, []float64{0, 0, 0, 0, 0, 0}, 0, 0},
		{"scale-in drains very slowly", 4, 12 * time.Second, []float64{0, 0, 0, 0, 0, 0}, 0, 0},
		{"traffic comes back", 1, never, []float64{0, 0, 0, 5, 5}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Policy{Max: 10, TargetConcurrency: 10}, tc.n)
			type at struct {
				t time.Time
				n int
			}
			var pending []at // decisions the count has yet to follow
			n, last, rises := tc.n, tc.n, 0
			var seq []int
			for _, conc := range tc.conc {
				for i := 0; i < 100; i++ {
					r.c.Advance(100 * time.Millisecond)
					now := r.c.Now()
					r.d.Observe(Sample{Concurrency: conc})
					for len(pending) > 0 && !pending[0].t.After(now) {
						n, pending = pending[0].n, pending[1:]
					}
					dec := r.d.Decide(Current{Replicas: n})
					if dec.Replicas > last {
						rises++
					}
					if dec.Replicas != last {
						seq = append(seq, dec.Replicas)
						pending = append(pending, at{now.Add(tc.lag), dec.Replicas})
					}
					last = dec.Replicas
				}
			}
			if rises != tc.rises || last != tc.final {
				t.Fatalf("decisions %d→%v: %d rises, last %d; want %d rises, last %d", tc.n, seq, rises, last, tc.rises, tc.final)
			}
		})
	}
}
