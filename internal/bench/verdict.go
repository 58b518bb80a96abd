package bench

import (
	"math"

	"github.com/shoal-run/shoal/internal/bench/worker"
)

func Verdict(v float64, ok func(float64) bool) string {
	switch {
	case math.IsNaN(v):
		return "not measured"
	case ok(v):
		return "met"
	default:
		return "**missed**"
	}
}

// OneLine folds s onto one table-safe line (see worker.OneLine).
func OneLine(s string) string { return worker.OneLine(s) }
