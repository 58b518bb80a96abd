package host

import (
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode and checks its report.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("host")
	benchtest.Quick(t, s, benchtest.MeasuredRows("shoal", "host", "container"))
}
