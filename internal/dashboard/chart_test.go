package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0, 1}, {0.3, 1}, {1, 1}, {1.2, 2}, {3, 5}, {7, 10}, {10, 10}, {11, 20}, {260, 500}, {501, 1000}} {
		if got := niceCeil(c.in); got != c.want {
			t.Errorf("niceCeil(%g) = %g, want %g", c.in, got, c.want)
		}
	}
}

// A chart puts the newest sample at the right edge and a value at the
// chart's top at 95% of its height; samples older than the span are left
// out.
func TestChartPoints(t *testing.T) {
	times := []time.Time{t0, t0.Add(30 * time.Second), t0.Add(60 * time.Second), t0.Add(90 * time.Second)}
	c := chart("x", times, t0.Add(90*time.Second), time.Minute,
		series{"c1", "v", 1, []float64{9, 0, 5, 10}})
	if c.Max != "10" || c.Span != "1 min" || len(c.Lines) != 1 {
		t.Fatalf("chart: %+v", c)
	}
	l := c.Lines[0]
	if l.Points != "0.0,100.0 300.0,52.5 600.0,5.0" || l.Last != "10.0" {
		t.Fatalf("line: %+v", l)
	}
	if e := chart("x", nil, t0, time.Minute, series{"c1", "v", 0, nil}); e.Lines[0].Points != "" || e.Lines[0].Last != "–" || e.Max != "1" {
		t.Fatalf("empty chart: %+v", e)
	}
}

func TestFmtInput(t *testing.T) {
	for in, want := range map[float64]string{2207744: "2207744", 0: "0", 0.01020408163265306: "0.0102", 9.6644e-05: "9.664e-05", 1.5: "1.5"} {
		if got := fmtInput(in); got != want {
			t.Errorf("fmtInput(%g) = %q, want %q", in, got, want)
		}
	}
}

// Only the busiest apps get charts: most requests over the window, then
// most replicas ready, then by name.
func TestOnlyTheBusiestAppsAreCharted(t *testing.T) {
	now := t0.Add(time.Minute)
	var apps []AppSnapshot
	for i := 0; i < maxCharted+3; i++ {
		a := AppSnapshot{}
		a.Name = fmt.Sprintf("app%02d", i)
		if i >= 3 {
			a.Points = []Point{{Time: now, RPS: float64(i)}}
		}
		apps = append(apps, a)
	}
	apps[0].Ready = 1                                               // idle but ready: above app01 and app02
	apps[3].Points = []Point{{Time: t0.Add(-time.Hour), RPS: 1000}} // outside the window
	v := view(Snapshot{Time: now, Apps: apps}, time.Minute)
	var charted []string
	for _, a := range v.Apps {
		if a.Charts != nil {
			charted = append(charted, a.Name)
		}
	}
	want := []string{"app00"}
	for i := 4; i < maxCharted+3; i++ {
		want = append(want, fmt.Sprintf("app%02d", i))
	}
	if strings.Join(charted, " ") != strings.Join(want, " ") || v.Uncharted != 3 {
		t.Fatalf("charted %v (%d left out), want %v", charted, v.Uncharted, want)
	}
}
