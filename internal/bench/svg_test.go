package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

// wellFormed parses svg as XML and counts elements by name.
func wellFormed(t *testing.T, svg []byte) map[string]int {
	t.Helper()
	counts := map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("svg is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
		}
	}
	return counts
}

func TestBarChart(t *testing.T) {
	svg := BarChart("lifecycle <ms>", []string{"create", "start", "total"}, []string{"shoal", "runc"},
		[][]float64{{3, 2}, {1.5, math.NaN()}, {20}})
	c := wellFormed(t, svg)
	// One background rect, two legend rects, four drawn bars (NaN and missing skipped).
	if c["rect"] != 1+2+4 {
		t.Errorf("rects = %d, want 7", c["rect"])
	}
	if !strings.Contains(string(svg), "lifecycle &lt;ms&gt;") {
		t.Error("title not escaped")
	}
}

func TestBarChartEmpty(t *testing.T) {
	wellFormed(t, BarChart("empty", nil, nil, nil))
}

func TestLineChart(t *testing.T) {
	svg := LineChart("samples", "run", "ms", []string{"a", "b"}, []float64{1, 2, 3, 4},
		[][]float64{{1, 2, 3, 4}, {4, math.NaN(), 2, 1}})
	c := wellFormed(t, svg)
	if c["path"] != 2 {
		t.Errorf("paths = %d, want 2", c["path"])
	}
	// The NaN breaks series b into two pieces: two moves.
	if n := strings.Count(string(svg), `d="M`) + strings.Count(string(svg), " M"); n != 3 {
		t.Errorf("moves = %d, want 3\n%s", n, svg)
	}
}

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
