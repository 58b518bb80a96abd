// Package autoscale decides how many replicas an app should run and how much
// CPU each replica may use. It is a pure decider: the serving controller feeds
// it concurrency samples (Observe) and asks for a Decision with the replicas it
// has now (Decide). It does no I/O, starts no goroutines and reads time only
// from an injected clock.Clock, so every rule is tested with synthetic series
// and a fake clock.
//
// # Horizontal: concurrency per replica
//
// Each Sample is the app's in-flight plus queued requests (ideally averaged by
// the proxy over the interval since the previous sample) and how many requests
// arrived in that interval. Decide averages the samples of two windows: the
// stable window and the short panic window. The averages are plain means of
// the samples whose time falls inside the window; with the controller's
// regular sampling (about every 100 ms) that equals the time-weighted mean,
// and a pause in sampling cannot give one stale sample the weight of the gap.
// Samples older than the stable window are dropped, so memory is bounded by
// the window and the sampling rate.
//
// The wanted count is ceil(average / TargetConcurrency), bounded by Min and
// Max. Growth is acted on at once. When the panic window's average asks for
// at least PanicThreshold times the replicas there are now, the decider
// panics: it follows the panic window and never scales down until a whole
// stable window has passed without the threshold being crossed again.
// Shrinking waits until a lower want has held for ScaleDownDelay, then goes to
// the highest want seen during that delay, and at most halves the count per
// step (steps are at least ScaleDownDelay apart). Zero is wanted only when Min
// is 0 and the stable window, observed in full, saw no traffic at all: no
// sample with concurrency above zero and no arrivals.
//
// # Vertical: CPU throttling and demand
//
// The cgroup CPU controller counts CFS periods in which a replica had work
// (nr_periods) and those in which it hit its quota (nr_throttled). Following
// the homeostatic-container rule, a replica throttled in at least
// ThrottleHigh (80%) of its periods since it was last judged asks for more
// CPU: its quota doubles, capped at MaxCPU (doubling 30% to 60% of a core
// halved response times within seconds in the FastContainer experiment).
// Demand asks too, throttled or not: a replica with two or more requests in
// flight that used at least 90% of its quota between two readings of its
// counters, or whose tasks waited for a CPU at least half of that time
// (its cgroup's PSI "some" total, where the kernel has it for the cgroup),
// is doubled the same way (at its ceiling it is no cause to scale out, as
// throttling there is: it may be waiting for CPUs the host's other work
// holds, which another replica beside it would not get either). Under
// ThrottleLow (10%), and only 10 s after its last demand (throttled,
// requests in flight), it lets go: the quota moves half way back to the base CPU,
// so it settles inside the band instead of jumping over it; a replica that ran
// for fewer than five periods in a whole stable window is idle and goes
// straight back to the base. A replica is judged once it has run at least
// five periods (half a second of work at the default 100 ms period) since
// its last verdict, or when a stable window has passed. Counters are
// cumulative, so the decider keeps each replica's last values: a replica seen
// for the first time, or whose counters went backwards (a new cgroup under the
// same id), only sets the baseline, and replicas missing from Current are
// forgotten. When replicas throttled at their ceiling are at least half of
// the app and there is more than one request per replica to spread, the
// decider adds one replica per decision.
//
// # Defaults and why they are shorter than Knative's
//
// Knative's defaults (60 s stable, 6 s panic, panic at 2x) fit pods that take
// seconds to start: a wrong scale-down costs a slow cold start, so it averages
// over a minute. A shoal replica thaws from the freezer in about a millisecond
// and cold-starts in tens of milliseconds, so a wrong scale-down is cheap to
// undo and the windows only need to be long enough to smooth request-level
// noise:
//
//   - StableWindow 10 s: a hundred samples at 100 ms, enough to average out
//     bursts of single requests, and a third of the default idle_timeout (30 s),
//     so the count has settled before the replica ladder freezes idle replicas.
//   - PanicWindow 1 s: ten samples, so one unlucky instant weighs a tenth, while
//     a burst gets replicas (ready in tens of ms) within about a second. It keeps
//     Knative's 1:10 ratio to the stable window.
//   - PanicThreshold 2: as in Knative. Smaller growth is handled by the stable
//     window, which also scales up at once; a lower threshold would latch the
//     no-scale-down mode on ordinary noise.
//   - ScaleDownDelay 5 s, halving per step: with the 10 s window, capacity
//     lingers for about 15 s after a burst ends and 16 replicas reach zero in
//     about 25 s more. An idle replica costs memory, not CPU, and one removed
//     too early costs a cold start, so there is no hurry either way; the delay
//     keeps the event log free of flapping.
//   - TargetConcurrency 10, Max 10: the example shoal.toml's values.
//   - ThrottleHigh 0.8, ThrottleLow 0.1: the thresholds of the homeostatic
//     literature; it judged over minutes, shoal judges every half second of
//     work, since a quota change is one cgroup write and as cheap to undo.
package autoscale
