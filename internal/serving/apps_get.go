package serving

import (
	"context"
	"net"
	"sort"

	"github.com/shoal-run/shoal/internal/api/types"
)

// List returns every app.
func (m *Manager) List(ctx context.Context) ([]types.App, error) {
	if m.o.Cluster != nil {
		if _, err := m.leading(); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	names := make([]string, 0, len(m.apps))
	for n := range m.apps {
		names = append(names, n)
	}
	m.mu.Unlock()
	sort.Strings(names)
	out := make([]types.App, 0, len(names))
	for _, n := range names {
		if a, err := m.Get(ctx, n); err == nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// Get returns an app and its replicas.
func (m *Manager) Get(ctx context.Context, name string) (types.App, error) {
	ctl := m.app(name)
	if ctl == nil {
		return types.App{}, m.noApp(name)
	}
	load := m.o.Router.Load(name)
	ctl.mu.Lock()
	defer ctl.unlock()
	a := types.App{
		Name: name, Image: ctl.rec.Config.Image, Revision: ctl.rec.Revision, Min: ctl.rec.Min, Max: ctl.rec.Max,
		CreatedAt: ctl.rec.Created, UpdatedAt: ctl.rec.Updated, Replicas: []types.Replica{}, URL: appURL(m.o.ProxyAddr, name),
	}
	for _, r := range ctl.reps {
		rp := types.Replica{ID: r.rec.ID, Revision: r.rec.Revision, State: string(r.rec.State), Pid: r.rec.Pid, Addr: r.rec.Addr,
			StartedAt: r.rec.StartedAt, ReadyAt: r.rec.ReadyAt, CPU: r.rec.CPU, CPUSet: r.rec.CPUSet, Reason: r.rec.Reason,
			InFlight: load.Endpoints[r.rec.ID].InFlight, Ordinal: r.rec.Ordinal}
		if ctl.cluster {
			rp.Node = r.rec.Node
		}
		if r.state == StateReady && r.closed {
			rp.Reason = "failing its health check"
		}
		a.Replicas = append(a.Replicas, rp)
		if r.rec.State == StateReady {
			a.Ready++
		}
	}
	sort.Slice(a.Replicas, func(i, j int) bool { return a.Replicas[i].StartedAt.Before(a.Replicas[j].StartedAt) })
	if pm := ctl.premade; pm != nil && pm.made {
		a.Premade = pm.r.rec.ID
	}
	if ro := ctl.rec.Rollout; ro != nil {
		a.Rollout = ro.wire()
		if progressing(ro) && ctl.roFailures > 0 {
			a.Rollout.Failures, a.Rollout.Reason = ctl.roFailures, ctl.lastErr
		}
	}
	a.Traffic = nil
	for _, t := range ctl.rec.Traffic {
		a.Traffic = append(a.Traffic, types.TrafficTarget{Revision: t.Revision, Percent: t.Percent})
	}
	if len(a.Traffic) == 0 {
		a.Traffic = []types.TrafficTarget{{Revision: ctl.rec.Revision, Percent: 100}}
	}
	a.Sticky = ctl.rec.Sticky
	a.Waiting = ctl.waiting
	if ctl.rec.Config.TCP() {
		a.TCP, a.TCPError = load.TCP, load.TCPError
	}
	switch {
	case ctl.deleting:
		a.State = "deleting"
	case ctl.failures > 0 && ctl.failures <= ctl.roFailures && ctl.inRoute() > 0:
		// Only the revision rolling out fails, and the one it would
		// replace serves: the rollout carries the failure.
		a.State, a.Error, a.Log = "running", ctl.lastErr, ctl.lastLog
	case ctl.failures > 0:
		a.State, a.Error, a.Log = "failing", ctl.lastErr, ctl.lastLog
	case a.Ready > 0:
		a.State = "running"
	default:
		a.State = "idle"
	}
	return a, nil
}

// appURL is where the proxy at proxyAddr serves app.
func appURL(proxyAddr, app string) string {
	if proxyAddr == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(proxyAddr)
	if err != nil {
		return ""
	}
	return "http://" + app + ".localhost:" + port + "/"
}
