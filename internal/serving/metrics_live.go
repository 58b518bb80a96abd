package serving

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// seriesQuiet is how long after its last request an app without
// replicas in service keeps its series in /metrics.
const seriesQuiet = 10 * time.Minute

// live reports the apps whose series /metrics shows: those with a
// replica in service (pending, starting, ready, draining) or a request in
// the last seriesQuiet. Thousands of idle apps (no replica, or only
// frozen ones) add nothing to a scrape.
func (m *Manager) live() map[string]bool {
	now := m.clock.Now()
	m.mu.Lock()
	ctls := make([]*appCtl, 0, len(m.apps))
	for _, ctl := range m.apps {
		ctls = append(ctls, ctl)
	}
	m.mu.Unlock()
	out := make(map[string]bool, len(ctls))
	for _, ctl := range ctls {
		ctl.mu.Lock()
		for _, r := range ctl.reps {
			switch r.state {
			case StatePending, StateStarting, StateReady, StateDraining:
				out[ctl.name] = true
			}
			if now.Sub(r.lastActive) < seriesQuiet {
				out[ctl.name] = true
			}
		}
		ctl.unlock()
	}
	return out
}

// Gatherer returns g with the series labelled with an app that is not
// live left out (a family left with no series goes too); series without
// an app label pass.
func (m *Manager) Gatherer(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		live := m.live()
		out := mfs[:0]
		for _, mf := range mfs {
			kept := mf.Metric[:0]
			for _, x := range mf.Metric {
				if app, ok := appLabel(x); !ok || live[app] {
					kept = append(kept, x)
				}
			}
			if len(kept) > 0 {
				mf.Metric = kept
				out = append(out, mf)
			}
		}
		return out, err
	})
}

func appLabel(x *dto.Metric) (string, bool) {
	for _, l := range x.GetLabel() {
		if l.GetName() == "app" {
			return l.GetValue(), true
		}
	}
	return "", false
}
