package bench_test

import (
	"math"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

func TestBarChart(t *testing.T) {
	svg := bench.BarChart("lifecycle <ms>", []string{"create", "start", "total"}, []string{"shoal", "runc"},
		[][]float64{{3, 2}, {1.5, math.NaN()}, {20}})
	c := benchtest.WellFormed(t, svg)
	// One background rect, two legend rects, four drawn bars (NaN and missing skipped).
	if c["rect"] != 1+2+4 {
		t.Errorf("rects = %d, want 7", c["rect"])
	}
	if !strings.Contains(string(svg), "lifecycle &lt;ms&gt;") {
		t.Error("title not escaped")
	}
}

func TestBarChartEmpty(t *testing.T) {
	benchtest.WellFormed(t, bench.BarChart("empty", nil, nil, nil))
}

func TestLineChart(t *testing.T) {
	svg := bench.LineChart("samples", "run", "ms", []string{"a", "b"}, []float64{1, 2, 3, 4},
		[][]float64{{1, 2, 3, 4}, {4, math.NaN(), 2, 1}})
	c := benchtest.WellFormed(t, svg)
	if c["path"] != 2 {
		t.Errorf("paths = %d, want 2", c["path"])
	}
	// The NaN breaks series b into two pieces: two moves.
	if n := strings.Count(string(svg), `d="M`) + strings.Count(string(svg), " M"); n != 3 {
		t.Errorf("moves = %d, want 3\n%s", n, svg)
	}
}
