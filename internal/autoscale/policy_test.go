package autoscale

import (
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestDefaults(t *testing.T) {
	got := Policy{}.WithDefaults()
	want := Policy{Max: 10, TargetConcurrency: 10, StableWindow: 10 * time.Second, PanicWindow: time.Second,
		PanicThreshold: 2, ScaleDownDelay: 5 * time.Second, ThrottleHigh: 0.8, ThrottleLow: 0.1}
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := (Policy{Min: 20}).WithDefaults(); p.Max != 20 {
		t.Fatalf("min 20 without max: max %d", p.Max)
	}
	if p := (Policy{StableWindow: 500 * time.Millisecond}).WithDefaults(); p.PanicWindow != 500*time.Millisecond {
		t.Fatalf("short stable window: panic window %s", p.PanicWindow)
	}
	set := Policy{Min: 1, Max: 3, TargetConcurrency: 2, StableWindow: time.Minute, PanicWindow: 6 * time.Second,
		PanicThreshold: 3, ScaleDownDelay: time.Second, CPU: 1, MaxCPU: 4, ThrottleHigh: 0.9, ThrottleLow: 0.2}
	if set.WithDefaults() != set {
		t.Fatal("WithDefaults changed fields that were set")
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		field string
		p     Policy
	}{
		{"scale.min", Policy{Min: -1}},
		{"scale.max", Policy{Max: -2}},
		{"scale.max", Policy{Min: 5, Max: 4}},
		{"scale.target_concurrency", Policy{TargetConcurrency: -1}},
		{"scale.stable_window", Policy{StableWindow: -time.Second}},
		{"scale.panic_window", Policy{PanicWindow: time.Minute}},
		{"scale.panic_threshold", Policy{PanicThreshold: 0.5}},
		{"scale.scale_down_delay", Policy{ScaleDownDelay: -time.Second}},
		{"resources.cpu", Policy{CPU: -1}},
		{"resources.max_cpu", Policy{MaxCPU: -1}},
		{"resources.max_cpu", Policy{MaxCPU: 2}},
		{"resources.max_cpu", Policy{CPU: 2, MaxCPU: 1}},
		{"scale.throttle_high", Policy{ThrottleHigh: 1.5}},
		{"scale.throttle_low", Policy{ThrottleLow: 0.9}},
	}
	for _, tc := range cases {
		err := tc.p.WithDefaults().Validate()
		if !errdefs.IsInvalid(err) || errdefs.Field(err) != tc.field {
			t.Errorf("%+v: error %v, want one for field %s", tc.p, err, tc.field)
		}
		if _, err := New(tc.p, clock.NewFake(t0)); errdefs.Field(err) != tc.field {
			t.Errorf("New(%+v): error %v, want one for field %s", tc.p, err, tc.field)
		}
	}
}
