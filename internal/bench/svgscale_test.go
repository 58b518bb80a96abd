package bench

import (
	"math"
	"testing"
)

func TestNiceScale(t *testing.T) {
	tests := []struct{ max, top, step float64 }{
		{0, 1, 0.2},
		{23, 25, 5},
		{140, 150, 50},
		{0.7, 0.8, 0.2},
		{100, 100, 20},
	}
	for _, tt := range tests {
		top, step := niceScale(tt.max)
		if math.Abs(top-tt.top) > 1e-9 || math.Abs(step-tt.step) > 1e-9 {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tt.max, top, step, tt.top, tt.step)
		}
	}
}
