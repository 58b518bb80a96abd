package routes

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// ReportEvery is how often a follower reports its proxy's load.
const ReportEvery = time.Second

// ReportMaxAge is the age past which the leader counts a report no more:
// its node stopped reporting (gone, cut off, or no traffic left).
const ReportMaxAge = 3 * time.Second

// reportTimeout bounds one report: a leader cut off without a word would
// otherwise hold it, and the reports to the next leader, until TCP gives
// up; the report would be stale by then anyway.
const reportTimeout = ReportMaxAge

// maxReportApps bounds the apps of one report: the busiest are sent.
const maxReportApps = 2048

// report is one follower's last report, as the leader received it.
type report struct {
	at    time.Time
	loads map[string]route.Load
}

// LoadSink takes a follower's report to the leader.
type LoadSink interface {
	ReportLoad(ctx context.Context, node string, loads map[string]route.Load) error
}

// Report takes a follower's per-app load: the leader's side of a report.
// The node's previous report is replaced.
func (r *Router) Report(node string, loads map[string]route.Load) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports[node] = report{at: r.clk.Now(), loads: loads}
}

// Load returns app's load in this node's proxy plus, on the leader, in
// the followers' reports that are fresh.
func (r *Router) Load(app string) route.Load {
	l := r.o.Local.Load(app)
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	// In the nodes' order, so that a failure to listen told by two
	// followers is told by the same one each time.
	for _, node := range slices.Sorted(maps.Keys(r.reports)) {
		rep := r.reports[node]
		if now.Sub(rep.at) > ReportMaxAge {
			delete(r.reports, node)
			continue
		}
		if x, ok := rep.loads[app]; ok {
			l = addLoad(l, x)
			if l.TCPError == "" && x.TCPError != "" {
				l.TCPError = "node " + node + ": " + x.TCPError
			}
		}
	}
	return l
}

// addLoad returns the load of a and b together; a TCP app's listener is
// a's (this node's proxy).
func addLoad(a, b route.Load) route.Load {
	out := route.Load{InFlight: a.InFlight + b.InFlight, Queued: a.Queued + b.Queued, Requests: a.Requests + b.Requests,
		LastRequest: later(a.LastRequest, b.LastRequest), TCP: a.TCP, TCPError: a.TCPError,
		Endpoints: make(map[string]route.EndpointLoad, len(a.Endpoints)+len(b.Endpoints))}
	for id, e := range a.Endpoints {
		out.Endpoints[id] = e
	}
	for id, e := range b.Endpoints {
		o := out.Endpoints[id]
		out.Endpoints[id] = route.EndpointLoad{InFlight: o.InFlight + e.InFlight, Requests: o.Requests + e.Requests,
			Answered: o.Answered + e.Answered, LastRequest: later(o.LastRequest, e.LastRequest)}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ReportLoads sends the load of this node's proxy (loads) to the leader
// through sink every ReportEvery while this node follows, until ctx
// ends. Only apps with traffic since the last report, or requests in
// flight, are sent; after a report with apps, one without tells the
// leader they are quiet.
func (r *Router) ReportLoads(ctx context.Context, loads func() map[string]route.Load, sink LoadSink) {
	var last map[string]route.Load
	sent := false
	for {
		t := r.clk.NewTimer(ReportEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if r.Leading() {
			last, sent = nil, false
			continue
		}
		all := loads()
		busy := busiest(all, last)
		last = all
		if len(busy) == 0 && !sent {
			continue
		}
		if err := r.reportOnce(ctx, sink, busy); err != nil {
			if ctx.Err() == nil {
				r.log.Debug("routes: report the proxy's load to the leader", "err", err)
			}
			continue
		}
		sent = len(busy) > 0
	}
}

// busiest returns the apps of now with requests in flight or requests
// since prev, or a TCP port this node's proxy cannot listen on, at most
// maxReportApps of them, the most in flight first.
func busiest(now, prev map[string]route.Load) map[string]route.Load {
	var apps []string
	for app, l := range now {
		if l.InFlight > 0 || l.Requests != prev[app].Requests || l.TCPError != "" {
			apps = append(apps, app)
		}
	}
	if len(apps) > maxReportApps {
		slices.SortFunc(apps, func(a, b string) int { return now[b].InFlight - now[a].InFlight })
		apps = apps[:maxReportApps]
	}
	out := make(map[string]route.Load, len(apps))
	for _, app := range apps {
		out[app] = now[app]
	}
	return out
}

// reportOnce sends one report through sink, given up after reportTimeout
// on the Router's clock.
func (r *Router) reportOnce(ctx context.Context, sink LoadSink, busy map[string]route.Load) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := r.clk.AfterFunc(reportTimeout, cancel)
	defer t.Stop()
	return sink.ReportLoad(ctx, r.o.Node, busy)
}
