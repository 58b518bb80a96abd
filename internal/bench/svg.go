package bench

import (
	"bytes"
	"fmt"
	"html"
	"math"
)

// Chart geometry shared by BarChart and LineChart.
const (
	chartW      = 720
	chartH      = 360
	marginLeft  = 64
	marginRight = 16
	marginTop   = 40
	marginBot   = 72
)

// palette holds the series colours, chosen to stay apart for colour-blind
// readers (Okabe–Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"}

// BarChart draws grouped vertical bars as SVG: one cluster per group, one bar
// per series inside it. values[g][s] is series s in group g; a NaN value, or a
// missing one, draws no bar. The title should name the unit.
func BarChart(title string, groups, series []string, values [][]float64) []byte {
	maxV := 0.0
	for _, row := range values {
		for _, v := range row {
			if !math.IsNaN(v) && v > maxV {
				maxV = v
			}
		}
	}
	top, step := niceScale(maxV)
	var b bytes.Buffer
	svgOpen(&b, title)
	plotH := float64(chartH - marginTop - marginBot)
	plotW := float64(chartW - marginLeft - marginRight)
	yAxis(&b, top, step, plotH)
	if len(groups) > 0 && len(series) > 0 {
		gw := plotW / float64(len(groups))
		bw := gw * 0.8 / float64(len(series))
		for g, name := range groups {
			x0 := float64(marginLeft) + gw*float64(g) + gw*0.1
			for s := range series {
				if g >= len(values) || s >= len(values[g]) || math.IsNaN(values[g][s]) {
					continue
				}
				v := values[g][s]
				h := v / top * plotH
				x := x0 + bw*float64(s)
				y := float64(marginTop) + plotH - h
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s / %s: %s</title></rect>`+"\n",
					x, y, math.Max(bw-2, 1), h, palette[s%len(palette)], esc(name), esc(series[s]), fmtNum(v))
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle">%s</text>`+"\n",
					x+bw/2-1, y-3, fmtNum(v))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" text-anchor="middle">%s</text>`+"\n",
				x0+gw*0.4, chartH-marginBot+16, esc(name))
		}
	}
	legend(&b, series)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// LineChart draws one line per series as SVG. xs are the shared x values and
// ys[s][i] is series s at xs[i]; NaN points break the line.
func LineChart(title, xLabel, yLabel string, series []string, xs []float64, ys [][]float64) []byte {
	maxY := 0.0
	for _, row := range ys {
		for _, v := range row {
			if !math.IsNaN(v) && v > maxY {
				maxY = v
			}
		}
	}
	minX, maxX := 0.0, 1.0
	if len(xs) > 0 {
		minX, maxX = xs[0], xs[0]
		for _, x := range xs {
			minX, maxX = math.Min(minX, x), math.Max(maxX, x)
		}
		if maxX == minX {
			maxX = minX + 1
		}
	}
	top, step := niceScale(maxY)
	var b bytes.Buffer
	svgOpen(&b, title)
	plotH := float64(chartH - marginTop - marginBot)
	plotW := float64(chartW - marginLeft - marginRight)
	yAxis(&b, top, step, plotH)
	px := func(x float64) float64 { return float64(marginLeft) + (x-minX)/(maxX-minX)*plotW }
	py := func(y float64) float64 { return float64(marginTop) + plotH - y/top*plotH }
	for s := range series {
		if s >= len(ys) {
			break
		}
		var path bytes.Buffer
		pen := false
		for i, x := range xs {
			if i >= len(ys[s]) || math.IsNaN(ys[s][i]) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f,%.1f ", cmd, px(x), py(ys[s][i]))
			pen = true
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", bytes.TrimSpace(path.Bytes()), palette[s%len(palette)])
	}
	_, xstep := niceScale(maxX - minX)
	for x := math.Ceil(minX/xstep) * xstep; x <= maxX+xstep/1e6; x += xstep {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>`+"\n", px(x), chartH-marginBot+16, fmtNum(x))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" text-anchor="middle">%s</text>`+"\n", marginLeft+int(plotW)/2, chartH-marginBot+34, esc(xLabel))
	fmt.Fprintf(&b, `<text x="14" y="%d" font-size="12" text-anchor="middle" transform="rotate(-90 14 %d)">%s</text>`+"\n",
		marginTop+int(plotH)/2, marginTop+int(plotH)/2, esc(yLabel))
	legend(&b, series)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func svgOpen(b *bytes.Buffer, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(b, `<text x="%d" y="24" font-size="15" font-weight="bold" text-anchor="middle">%s</text>`+"\n", chartW/2, esc(title))
}

// yAxis draws horizontal grid lines and labels from 0 to top every step.
func yAxis(b *bytes.Buffer, top, step, plotH float64) {
	for v := 0.0; v <= top+step/1e6; v += step {
		y := float64(marginTop) + plotH - v/top*plotH
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", marginLeft, y, chartW-marginRight, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", marginLeft-6, y+4, fmtNum(v))
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", marginLeft, marginTop, marginLeft, float64(marginTop)+plotH)
}

func legend(b *bytes.Buffer, series []string) {
	x := marginLeft
	y := chartH - 18
	for s, name := range series {
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/>`, x, y-9, palette[s%len(palette)])
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11">%s</text>`+"\n", x+14, y, esc(name))
		x += 24 + 7*len([]rune(name))
	}
}

// niceScale returns an axis top at or above maxV and a tick step of 1, 2 or 5
// times a power of ten that gives about five ticks.
func niceScale(maxV float64) (top, step float64) {
	if maxV <= 0 || math.IsNaN(maxV) || math.IsInf(maxV, 0) {
		return 1, 0.2
	}
	raw := maxV / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch r := raw / mag; {
	case r <= 1:
		step = mag
	case r <= 2:
		step = 2 * mag
	case r <= 5:
		step = 5 * mag
	default:
		step = 10 * mag
	}
	return math.Ceil(maxV/step) * step, step
}

func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a < 1:
		return fmt.Sprintf("%.2f", v)
	case a < 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func esc(s string) string { return html.EscapeString(s) }
