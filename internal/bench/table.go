package bench

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Table is a table of measured rows for a report.
type Table struct {
	// Title becomes a "#### " heading (under the report's "### " headings);
	// empty for none.
	Title string
	// Command is the exact command that produced the table (default: the
	// report's command).
	Command string
	// Note is a sentence or two under "Command: ..." saying what a row
	// measures.
	Note string
	// Unit names the values' unit, e.g. "ms" or "MB/s".
	Unit string
	// HigherIsBetter is true for rates (MB/s, requests/s), false for times.
	HigherIsBetter bool
	// Baseline is the Name of the row the ratio column divides by; empty
	// for no ratio column.
	Baseline string
	Rows     []Row
}

// Row is one subject of a table: its samples, one per recorded run, or why
// it has none.
type Row struct {
	Name    string
	Command string // the exact command or call measured
	Values  []float64
	Err     string // why the row has no numbers; empty when it has
	// Baseline, if set, is the row this one's ratio divides by instead of
	// the table's (for tables of pairs, e.g. host and container per size).
	Baseline string
}

// OK reports whether the row has numbers.
func (w Row) OK() bool { return w.Err == "" && len(w.Values) > 0 }

// Stats summarises the row's values.
func (w Row) Stats() Stat { return Stats(w.Values) }

// Row returns the row called name, or a zero Row.
func (t Table) Row(name string) Row {
	for _, w := range t.Rows {
		if w.Name == name {
			return w
		}
	}
	return Row{Name: name, Err: "no such row"}
}

// Median returns the median of row name, NaN when it has no numbers.
func (t Table) Median(name string) float64 {
	w := t.Row(name)
	if !w.OK() {
		return math.NaN()
	}
	return w.Stats().Median
}

// Ratio returns the median of row a over the median of row b, NaN when
// either has no numbers.
func (t Table) Ratio(a, b string) float64 {
	ma, mb := t.Median(a), t.Median(b)
	if mb == 0 {
		return math.NaN()
	}
	return ma / mb
}

func (t Table) markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	if t.Title != "" {
		p("#### %s\n\n", t.Title)
	}
	p("Command: `%s`.", t.Command)
	if t.Note != "" {
		p(" %s", strings.TrimSpace(t.Note))
	}
	better := "lower is better"
	if t.HigherIsBetter {
		better = "higher is better"
	}
	p(" Values in %s (%s); spread is min–max over the runs", t.Unit, better)
	if t.Baseline != "" {
		p("; the last column is the ratio of medians to *%s*, measured in the same run", t.Baseline)
	}
	p(".\n\n")
	p("| subject | exact command | median | p99 | spread | stddev | runs |")
	if t.Baseline != "" {
		label := "vs " + t.Baseline
		for _, w := range t.Rows {
			if w.Baseline != "" {
				label = "ratio"
			}
		}
		p(" %s |", label)
	}
	p("\n|---|---|---:|---:|---:|---:|---:|")
	if t.Baseline != "" {
		p("---:|")
	}
	p("\n")
	for _, w := range t.Rows {
		cmd := "–"
		if w.Command != "" {
			cmd = "`" + strings.ReplaceAll(w.Command, "|", "\\|") + "`"
		}
		if !w.OK() {
			reason := w.Err
			if reason == "" {
				reason = "no samples"
			}
			p("| %s | %s | not run: %s |||||", w.Name, cmd, OneLine(reason))
			if t.Baseline != "" {
				p("|")
			}
			p("\n")
			continue
		}
		s := w.Stats()
		p("| %s | %s | %s | %s | %s–%s | %s | %d |", w.Name, cmd, FormatValue(s.Median), FormatValue(s.P99),
			FormatValue(s.Min), FormatValue(s.Max), FormatValue(s.Stddev), s.N)
		if t.Baseline != "" {
			base := t.Baseline
			if w.Baseline != "" {
				base = w.Baseline
			}
			p(" %s |", FormatRatio(t.Ratio(w.Name, base)))
		}
		p("\n")
	}
	p("\n")
	return b.String()
}

// Stat describes a set of float samples.
type Stat struct {
	N                                int
	Median, P90, P99, Min, Max, Mean float64
	Stddev                           float64
}

// Stats summarises values like Summarize does durations.
func Stats(values []float64) Stat {
	n := len(values)
	if n == 0 {
		return Stat{Median: math.NaN(), P90: math.NaN(), P99: math.NaN(), Min: math.NaN(), Max: math.NaN(), Mean: math.NaN(), Stddev: math.NaN()}
	}
	s := append([]float64(nil), values...)
	sort.Float64s(s)
	pct := func(p float64) float64 {
		rank := p / 100 * float64(n-1)
		lo, hi := int(math.Floor(rank)), int(math.Ceil(rank))
		return s[lo] + (rank-float64(lo))*(s[hi]-s[lo])
	}
	var sum float64
	for _, v := range s {
		sum += v
	}
	mean := sum / float64(n)
	var sq float64
	for _, v := range s {
		sq += (v - mean) * (v - mean)
	}
	sd := 0.0
	if n > 1 {
		sd = math.Sqrt(sq / float64(n-1))
	}
	return Stat{N: n, Median: pct(50), P90: pct(90), P99: pct(99), Min: s[0], Max: s[n-1], Mean: mean, Stddev: sd}
}

// FormatValue formats a value with precision that suits its size, like
// FormatMS.
func FormatValue(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	switch a := math.Abs(v); {
	case a < 1:
		return fmt.Sprintf("%.3f", v)
	case a < 10:
		return fmt.Sprintf("%.2f", v)
	case a < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// Millis converts durations to milliseconds.
func Millis(d ...time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = float64(x) / float64(time.Millisecond)
	}
	return out
}

// Subject is one thing Measure runs: Run performs run i once and returns
// its value in the table's unit (use Millis for a duration).
type Subject struct {
	Name    string
	Command string
	Run     func(ctx context.Context, i int) (float64, error)
}

// Measure runs warmup unrecorded runs of each subject, then runs recorded
// runs interleaved (A, B, C, A, B, C, ...) after letting the host settle,
// and returns one Row per subject in order. A subject that fails stops
// being run and its row keeps the error; Measure itself fails only when
// ctx ends.
func Measure(ctx context.Context, o Options, warmup, runs int, subjects []Subject) ([]Row, error) {
	rows := make([]Row, len(subjects))
	for i, s := range subjects {
		rows[i] = Row{Name: s.Name, Command: s.Command}
	}
	seq := 0
	for k := 0; k < warmup+runs; k++ {
		for j, s := range subjects {
			if rows[j].Err != "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				return rows, err
			}
			seq++
			recorded := k >= warmup
			if recorded {
				Settle(ctx, SettleIdle, SettleWindow, SettleMax)
				o.Logf("%s: %d/%d", s.Name, k-warmup+1, runs)
			} else {
				o.Logf("%s: warm-up %d/%d", s.Name, k+1, warmup)
			}
			v, err := s.Run(ctx, seq)
			if err != nil {
				if ctx.Err() != nil {
					return rows, ctx.Err()
				}
				rows[j].Err = err.Error()
				rows[j].Values = nil
				continue
			}
			if recorded {
				rows[j].Values = append(rows[j].Values, v)
			}
		}
	}
	return rows, nil
}

// BarsOf draws a bar chart of medians: one group per table, one bar per
// row name in series (missing rows draw no bar).
func BarsOf(title string, groups []string, series []string, tables []Table) []byte {
	values := make([][]float64, len(tables))
	for g, t := range tables {
		values[g] = make([]float64, len(series))
		for s, name := range series {
			values[g][s] = t.Median(name)
		}
	}
	return BarChart(title, groups, series, values)
}

// Overlap returns a sentence saying that rows a and b cannot be told apart
// in this run because their spreads (min–max) overlap and the medians are
// within 20 % of each other, or "" when they can.
func (t Table) Overlap(a, b string) string {
	ra, rb := t.Row(a), t.Row(b)
	if !ra.OK() || !rb.OK() {
		return ""
	}
	sa, sb := ra.Stats(), rb.Stats()
	if sa.Min > sb.Max || sb.Min > sa.Max {
		return ""
	}
	if r := sa.Median / sb.Median; r > 1.2 || r < 1/1.2 {
		return fmt.Sprintf(" The spreads of *%s* and *%s* overlap: the host was busy during this run and the difference may be noise.", a, b)
	}
	return fmt.Sprintf(" The spreads of *%s* and *%s* overlap: this run cannot tell them apart.", a, b)
}
