package dashboard

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

//go:embed ui
var uiFiles embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"clock": func(t time.Time) string { return t.Local().Format("15:04:05") },
	"cores": func(v float64) string { return fmtNum(v, 2) },
	"gib":   func(b int64) string { return fmtNum(float64(b)/(1<<30), 1) },
}).ParseFS(uiFiles, "ui/*.html"))

// staticFiles serves the script and the style sheet.
func staticFiles() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui/static")
	if err != nil {
		panic(err)
	}
	return http.FileServerFS(sub)
}

// sectionNames are the parts of the page that the stream replaces, each
// the id of its element and the name of its template (nodes only in a
// cluster). The apps section is sent whole when the list of apps changes,
// else app by app.
var sectionNames = []string{"summary", "jobs", "nodes", "certs"}

// pageView is what the templates draw.
type pageView struct {
	Time    time.Time
	Err     string
	Apps    []appView
	Ready   int // replicas ready, of all apps
	Frozen  int
	Tenants []Tenant
	Jobs    JobStats
	JobHist chartView
	Cluster bool // the page has a nodes section
	Nodes   []types.Node
	Certs   []types.Cert
	Events  []eventView
	After   int64 // the last event shown
	Spans   []spanChoice
	// Uncharted counts the apps drawn without charts (beyond ChartedMax).
	Uncharted  int
	ChartedMax int
}

// spanChoice is one of the chart windows a page offers.
type spanChoice struct {
	Value, Label string
	Current      bool
}

type appView struct {
	types.App
	Revisions  []revisionView
	Charts     []chartView
	ChartedMax int
}

// revisionView is a revision with its share of the traffic and its replicas.
type revisionView struct {
	Revision int
	Percent  int
	Current  bool
	Replicas string // "1 ready, 2 frozen"
}

type eventView struct {
	types.Event
	Inputs string
}

// maxCharted bounds the apps drawn with charts, the busiest ones, so that a
// host of thousands of small apps still gets a light page.
const maxCharted = 12

// view turns a snapshot into what the templates draw, with charts over
// span for the busiest apps.
func view(s Snapshot, span time.Duration) pageView {
	v := pageView{Time: s.Time, Err: s.Err, Tenants: s.Tenants, Jobs: s.Jobs, JobHist: jobChart(s.JobHist, s.Time, span),
		Cluster: s.Cluster, Nodes: s.Nodes, Certs: s.Certs}
	charted := busiest(s.Apps, s.Time, span, maxCharted)
	v.Uncharted, v.ChartedMax = len(s.Apps)-len(charted), maxCharted
	for _, a := range s.Apps {
		av := appView{App: a.App, Revisions: revisions(a.App), ChartedMax: maxCharted}
		if charted[a.Name] {
			av.Charts = appCharts(a.Points, s.Time, span)
		}
		for _, r := range a.Replicas {
			switch r.State {
			case "ready":
				v.Ready++
			case "frozen":
				v.Frozen++
			}
		}
		v.Apps = append(v.Apps, av)
	}
	return v
}

// busiest names the n apps with the most requests over span, then the
// most replicas ready, then by name.
func busiest(apps []AppSnapshot, now time.Time, span time.Duration, n int) map[string]bool {
	type rank struct {
		name  string
		reqs  float64
		ready int
	}
	ranks := make([]rank, len(apps))
	for i, a := range apps {
		ranks[i] = rank{name: a.Name, ready: a.Ready}
		for _, p := range a.Points {
			if now.Sub(p.Time) <= span {
				ranks[i].reqs += p.RPS
			}
		}
	}
	sort.Slice(ranks, func(i, j int) bool {
		a, b := ranks[i], ranks[j]
		if a.reqs != b.reqs {
			return a.reqs > b.reqs
		}
		if a.ready != b.ready {
			return a.ready > b.ready
		}
		return a.name < b.name
	})
	out := make(map[string]bool, n)
	for _, r := range ranks[:min(n, len(ranks))] {
		out[r.name] = true
	}
	return out
}

// revisions lists the revisions that take traffic or have replicas,
// newest first.
func revisions(a types.App) []revisionView {
	byRev := map[int]*revisionView{}
	get := func(n int) *revisionView {
		if byRev[n] == nil {
			byRev[n] = &revisionView{Revision: n, Current: n == a.Revision}
		}
		return byRev[n]
	}
	if len(a.Traffic) == 0 && a.Revision > 0 {
		get(a.Revision).Percent = 100
	}
	for _, t := range a.Traffic {
		get(t.Revision).Percent = t.Percent
	}
	counts := map[int]map[string]int{}
	for _, r := range a.Replicas {
		get(r.Revision)
		if counts[r.Revision] == nil {
			counts[r.Revision] = map[string]int{}
		}
		counts[r.Revision][r.State]++
	}
	out := make([]revisionView, 0, len(byRev))
	for n, rv := range byRev {
		var parts []string
		for st, k := range counts[n] {
			parts = append(parts, fmt.Sprintf("%d %s", k, st))
		}
		sort.Strings(parts)
		rv.Replicas = strings.Join(parts, ", ")
		if rv.Replicas == "" {
			rv.Replicas = "no replicas"
		}
		out = append(out, *rv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision > out[j].Revision })
	return out
}

func eventOf(e types.Event) eventView {
	keys := make([]string, 0, len(e.Inputs))
	for k := range e.Inputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + fmtInput(e.Inputs[k])
	}
	return eventView{Event: e, Inputs: strings.Join(parts, " ")}
}

// fmtInput shows a whole number as it is and any other with four
// significant digits.
func fmtInput(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// rendered is one sample as the stream sends it: the sections, and the
// apps one by one, in the page's order.
type rendered struct {
	sections map[string]string // by element id
	note     string            // what the apps section says before the apps
	names    []string
	apps     map[string]string // name → its article
}

// appsHTML is the whole apps section.
func (r *rendered) appsHTML() string {
	var b strings.Builder
	b.WriteString(r.note)
	for _, n := range r.names {
		b.WriteString(r.apps[n])
	}
	return b.String()
}

// renderCache renders each sample once, whatever the number of pages that
// show it.
type renderCache struct {
	mu     sync.Mutex
	seq    uint64
	bySpan map[time.Duration]*rendered // by chart span
}

func (c *renderCache) get(s Snapshot, span time.Duration) (*rendered, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seq != s.Seq || c.bySpan == nil {
		c.seq, c.bySpan = s.Seq, map[time.Duration]*rendered{}
	}
	if r := c.bySpan[span]; r != nil {
		return r, nil
	}
	v := view(s, span)
	r := &rendered{sections: make(map[string]string, len(sectionNames)), apps: make(map[string]string, len(v.Apps))}
	var b bytes.Buffer
	exec := func(name string, data any) (string, error) {
		b.Reset()
		if err := templates.ExecuteTemplate(&b, name, data); err != nil {
			return "", fmt.Errorf("dashboard: section %s: %w", name, err)
		}
		return b.String(), nil
	}
	for _, name := range sectionNames {
		if name == "nodes" && !v.Cluster {
			continue
		}
		html, err := exec(name, v)
		if err != nil {
			return nil, err
		}
		r.sections[name] = html
	}
	var err error
	if r.note, err = exec("apps-note", v); err != nil {
		return nil, err
	}
	for _, a := range v.Apps {
		html, err := exec("app", a)
		if err != nil {
			return nil, err
		}
		r.names = append(r.names, a.Name)
		r.apps[a.Name] = html
	}
	c.bySpan[span] = r
	return r, nil
}

// renderEvent renders one row of the event table.
func renderEvent(e types.Event) (string, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, "event", eventOf(e)); err != nil {
		return "", fmt.Errorf("dashboard: event %d: %w", e.Seq, err)
	}
	return b.String(), nil
}
