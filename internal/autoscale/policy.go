package autoscale

import (
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Defaults filled in by Policy.WithDefaults; the package doc says why.
const (
	DefaultMax               = 10
	DefaultTargetConcurrency = 10.0
	DefaultStableWindow      = 10 * time.Second
	DefaultPanicWindow       = time.Second
	DefaultPanicThreshold    = 2.0
	DefaultScaleDownDelay    = 5 * time.Second
	DefaultThrottleHigh      = 0.8
	DefaultThrottleLow       = 0.1
)

// Policy is how one app scales. The zero value of a field means its default
// (see WithDefaults), except CPU and MaxCPU, where 0 turns vertical scaling off.
type Policy struct {
	// Min and Max bound the replica count. Min 0 allows scale to zero.
	Min, Max int
	// TargetConcurrency is the in-flight requests one replica should carry.
	TargetConcurrency float64
	// Metric, when set, names an app-published metric that the decider
	// follows instead of concurrency (Sample.Metric), with Target its
	// value per replica (default DefaultTargetConcurrency).
	Metric string
	Target float64
	// StableWindow and PanicWindow are the averaging windows; PanicWindow
	// must not be longer than StableWindow.
	StableWindow, PanicWindow time.Duration
	// PanicThreshold is how many times the current replicas the panic
	// window must want before the decider panics (greater than 1).
	PanicThreshold float64
	// ScaleDownDelay is how long a lower want must hold before the count
	// shrinks, and the least time between two shrinking steps.
	ScaleDownDelay time.Duration
	// CPU is a replica's base quota in cores and MaxCPU the ceiling that
	// vertical scaling may raise it to. Vertical scaling is on when both are
	// set and MaxCPU > CPU.
	CPU, MaxCPU float64
	// ThrottleHigh and ThrottleLow are the fractions of CFS periods
	// throttled at or above which a replica asks for more CPU, and under
	// which it gives CPU back.
	ThrottleHigh, ThrottleLow float64
}

// WithDefaults returns p with every zero field but CPU and MaxCPU set to its
// default. Max defaults to the larger of DefaultMax and Min.
func (p Policy) WithDefaults() Policy {
	if p.Max == 0 {
		p.Max = max(DefaultMax, p.Min)
	}
	if p.TargetConcurrency == 0 {
		p.TargetConcurrency = DefaultTargetConcurrency
	}
	if p.Metric != "" && p.Target == 0 {
		p.Target = DefaultTargetConcurrency
	}
	if p.StableWindow == 0 {
		p.StableWindow = DefaultStableWindow
	}
	if p.PanicWindow == 0 {
		p.PanicWindow = min(DefaultPanicWindow, p.StableWindow)
	}
	if p.PanicThreshold == 0 {
		p.PanicThreshold = DefaultPanicThreshold
	}
	if p.ScaleDownDelay == 0 {
		p.ScaleDownDelay = DefaultScaleDownDelay
	}
	if p.ThrottleHigh == 0 {
		p.ThrottleHigh = DefaultThrottleHigh
	}
	if p.ThrottleLow == 0 {
		p.ThrottleLow = min(DefaultThrottleLow, p.ThrottleHigh/2)
	}
	return p
}

// Validate checks a policy after WithDefaults. Errors are errdefs field
// errors named as in shoal.toml ("scale.max", "resources.max_cpu").
func (p Policy) Validate() error {
	switch {
	case p.Min < 0:
		return errdefs.Invalid("scale.min", "must not be negative, got %d", p.Min)
	case p.Max < 1:
		return errdefs.Invalid("scale.max", "must be at least 1, got %d", p.Max)
	case p.Min > p.Max:
		return errdefs.Invalid("scale.max", "must not be below scale.min (%d), got %d", p.Min, p.Max)
	case !(p.TargetConcurrency > 0):
		return errdefs.Invalid("scale.target_concurrency", "must be above 0, got %g", p.TargetConcurrency)
	case p.Metric != "" && !(p.Target > 0):
		return errdefs.Invalid("scale.target", "must be above 0, got %g", p.Target)
	case p.StableWindow <= 0:
		return errdefs.Invalid("scale.stable_window", "must be above 0, got %s", p.StableWindow)
	case p.PanicWindow <= 0 || p.PanicWindow > p.StableWindow:
		return errdefs.Invalid("scale.panic_window", "must be above 0 and at most scale.stable_window (%s), got %s", p.StableWindow, p.PanicWindow)
	case !(p.PanicThreshold > 1):
		return errdefs.Invalid("scale.panic_threshold", "must be above 1, got %g", p.PanicThreshold)
	case p.ScaleDownDelay < 0:
		return errdefs.Invalid("scale.scale_down_delay", "must not be negative, got %s", p.ScaleDownDelay)
	case p.CPU < 0:
		return errdefs.Invalid("resources.cpu", "must not be negative, got %g", p.CPU)
	case p.MaxCPU < 0:
		return errdefs.Invalid("resources.max_cpu", "must not be negative, got %g", p.MaxCPU)
	case p.MaxCPU > 0 && p.CPU == 0:
		return errdefs.Invalid("resources.max_cpu", "needs resources.cpu, the base quota it scales from")
	case p.MaxCPU > 0 && p.MaxCPU < p.CPU:
		return errdefs.Invalid("resources.max_cpu", "must not be below resources.cpu (%g), got %g", p.CPU, p.MaxCPU)
	case !(p.ThrottleHigh > 0 && p.ThrottleHigh <= 1):
		return errdefs.Invalid("scale.throttle_high", "must be in (0, 1], got %g", p.ThrottleHigh)
	case !(p.ThrottleLow > 0 && p.ThrottleLow < p.ThrottleHigh):
		return errdefs.Invalid("scale.throttle_low", "must be above 0 and below scale.throttle_high (%g), got %g", p.ThrottleHigh, p.ThrottleLow)
	}
	return nil
}

// vertical reports whether the policy lets quotas move.
func (p Policy) vertical() bool { return p.CPU > 0 && p.MaxCPU > p.CPU }

// clamp bounds n to [Min, Max].
func (p Policy) clamp(n int) int { return min(max(n, p.Min), p.Max) }

// target is what one replica should carry of what the decider follows.
func (p Policy) target() float64 {
	if p.Metric != "" {
		return p.Target
	}
	return p.TargetConcurrency
}

// value is what the decider follows in sample s.
func (p Policy) value(s Sample) float64 {
	if p.Metric != "" {
		return s.Metric
	}
	return s.Concurrency
}

// signal names what the decider follows, for reasons.
func (p Policy) signal() string {
	if p.Metric != "" {
		return "metric " + p.Metric
	}
	return "concurrency"
}

// input names what the decider follows, for inputs ("stable_" + input).
func (p Policy) input() string {
	if p.Metric != "" {
		return "metric"
	}
	return "concurrency"
}
