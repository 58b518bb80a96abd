package dashboard

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Chart geometry, in the SVG's own units (it is stretched to the page's
// width).
const (
	chartW = 600
	chartH = 100
)

// chartView is one chart as the template draws it.
type chartView struct {
	Title string
	Max   string // the value at the top of the chart
	Span  string // how far back the left edge is
	Lines []lineView
}

// lineView is one series of a chart.
type lineView struct {
	Class  string // the line's colour, from the style sheet
	Label  string
	Last   string // the latest value
	Points string // SVG polyline points
}

// series is one line's values, one per sample time.
type series struct {
	class, label string
	decimals     int
	vals         []float64
}

// chart draws series sampled at times over the window that ends at now
// and spans span: newest at the right edge, and the top of the chart a
// round number at or above the highest value (at least 1).
func chart(title string, times []time.Time, now time.Time, span time.Duration, ss ...series) chartView {
	top := 0.0
	for _, s := range ss {
		for _, v := range s.vals {
			top = math.Max(top, v)
		}
	}
	top = niceCeil(top)
	c := chartView{Title: title, Max: fmtNum(top, 0), Span: fmtSpan(span)}
	for _, s := range ss {
		var b strings.Builder
		for i, t := range times {
			age := now.Sub(t)
			if age > span || age < 0 {
				continue
			}
			x := chartW * (1 - age.Seconds()/span.Seconds())
			y := chartH - chartH*0.95*s.vals[i]/top
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
		}
		l := lineView{Class: s.class, Label: s.label, Points: b.String(), Last: "–"}
		if n := len(s.vals); n > 0 {
			l.Last = fmtNum(s.vals[n-1], s.decimals)
		}
		c.Lines = append(c.Lines, l)
	}
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64, decimals int) string {
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

func fmtSpan(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return strconv.Itoa(int(d/time.Minute)) + " min"
	}
	return d.Round(time.Second).String()
}

// appCharts are the four charts of an app.
func appCharts(pts []Point, now time.Time, span time.Duration) []chartView {
	n := len(pts)
	times := make([]time.Time, n)
	rps, inflight, queued, ready, frozen, other, cpu := make([]float64, n), make([]float64, n), make([]float64, n),
		make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i, p := range pts {
		times[i] = p.Time
		rps[i], inflight[i], queued[i] = p.RPS, float64(p.InFlight), float64(p.Queued)
		ready[i], frozen[i], other[i], cpu[i] = float64(p.Ready), float64(p.Frozen), float64(p.Other), p.CPU
	}
	return []chartView{
		chart("requests / s", times, now, span, series{"c1", "req/s", 1, rps}),
		chart("concurrency", times, now, span, series{"c1", "in flight", 0, inflight}, series{"c3", "queued", 0, queued}),
		chart("replicas", times, now, span, series{"c2", "ready", 0, ready}, series{"c4", "frozen", 0, frozen},
			series{"c3", "other", 0, other}),
		chart("CPU quota (cores)", times, now, span, series{"c5", "cores", 2, cpu}),
	}
}

// jobChart is the chart of the job queue.
func jobChart(pts []JobPoint, now time.Time, span time.Duration) chartView {
	n := len(pts)
	times := make([]time.Time, n)
	queued, running := make([]float64, n), make([]float64, n)
	for i, p := range pts {
		times[i], queued[i], running[i] = p.Time, float64(p.Queued), float64(p.Running)
	}
	return chart("jobs", times, now, span, series{"c3", "queued", 0, queued}, series{"c2", "running", 0, running})
}
