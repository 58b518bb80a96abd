package bench

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Report is the outcome of one suite run: its section of
// docs/benchmarks.md (a header written by the harness, then the tables,
// plots and paragraphs the suite added in order) and its charts.
type Report struct {
	Suite   string
	Title   string
	Command string
	Quick   bool
	Machine Machine
	Started time.Time
	Elapsed time.Duration

	body   strings.Builder
	tables []Table
	charts map[string][]byte
	order  []string // chart names in the order added
}

// NewReport starts the report of suite (title is its section heading) with
// the machine's description and o's command.
func NewReport(ctx context.Context, suite, title string, o Options) *Report {
	return &Report{Suite: suite, Title: title, Command: o.Command, Quick: o.Quick,
		Machine: CollectMachine(ctx), Started: time.Now()}
}

// finish records the elapsed time once.
func (r *Report) finish() {
	if r.Elapsed == 0 && !r.Started.IsZero() {
		r.Elapsed = time.Since(r.Started)
	}
}

// Heading adds a "### title" subsection heading.
func (r *Report) Heading(title string) {
	fmt.Fprintf(&r.body, "### %s\n\n", title)
}

// Para adds a paragraph. Paragraphs that interpret numbers should compute
// their text from the measured figures (see Table.Median and Ratio).
func (r *Report) Para(format string, a ...any) {
	fmt.Fprintf(&r.body, strings.TrimSpace(format)+"\n\n", a...)
}

// Markdown adds raw Markdown.
func (r *Report) Markdown(md string) {
	r.body.WriteString(md)
}

// Plot adds a chart: name is its file name (a plain NAME.svg, written next
// to benchmarks.md; prefix it with the suite's name), alt its alt text.
func (r *Report) Plot(name, alt string, svg []byte) {
	if r.charts == nil {
		r.charts = map[string][]byte{}
	}
	if _, seen := r.charts[name]; !seen {
		r.order = append(r.order, name)
	}
	r.charts[name] = svg
	fmt.Fprintf(&r.body, "![%s](%s)\n\n", alt, name)
}

// Table adds a table of rows summarised as median, p99 and spread, with
// a ratio column when t.Baseline names one of its rows.
func (r *Report) Table(t Table) {
	if t.Command == "" {
		t.Command = r.Command
	}
	r.tables = append(r.tables, t)
	r.body.WriteString(t.markdown())
}

// Tables returns the tables added so far.
func (r *Report) Tables() []Table { return r.tables }

// Charts returns the suite's plots by file name.
func (r *Report) Charts() map[string][]byte { return r.charts }

// Section renders the whole section: heading, how and where it was
// produced, the machine, then the body.
func (r *Report) Section() string {
	var b strings.Builder
	title := r.Title
	if title == "" {
		title = r.Suite
	}
	fmt.Fprintf(&b, "## %s\n\n", title)
	fmt.Fprintf(&b, "Produced by `%s` on %s; the suite took %s.", r.Command,
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Elapsed.Round(time.Second))
	if r.Quick {
		b.WriteString(" Quick mode: few samples, small inputs; do not quote these numbers.")
	}
	b.WriteString("\n\n")
	b.WriteString(r.Machine.Markdown())
	b.WriteString("\n")
	b.WriteString(r.body.String())
	return b.String()
}

// WriteDocs writes the report's section and charts under docsDir and
// regenerates docsDir/benchmarks.md.
func (r *Report) WriteDocs(docsDir string) error {
	r.finish()
	return WriteDocs(docsDir, r.Suite, r.Section(), r.charts)
}

// Failed renders a section for a suite that could not produce a report.
func Failed(ctx context.Context, s Suite, o Options, err error) *Report {
	o, _ = o.WithDefaults(s.Name)
	r := NewReport(ctx, s.Name, s.Title, o)
	r.Para("The suite failed on this machine: %s", OneLine(err.Error()))
	return r
}
