package serving

import (
	"sync"
	"time"
)

// quietApps are the apps whose last round found them quiet (every replica
// ready or frozen, no request for quietAfter), each with that round's
// time. Their controllers sleep until their next deadline; one sweep a
// tick, for the whole node, reads their load and wakes those a request
// came to since (quietEnded): a burst onto a ready replica (the proxy
// wakes nobody, an endpoint is free) reaches the autoscaler within a tick,
// and idle apps cost no timer of their own between rounds.
type quietApps struct {
	mu   sync.Mutex
	apps map[*appCtl]time.Time
	run  bool // the sweep runs
}

// setQuiet records whether ctl's round at at found it quiet, and starts
// the sweep at the first quiet app.
func (m *Manager) setQuiet(ctl *appCtl, quiet bool, at time.Time) {
	q := &m.quiet
	q.mu.Lock()
	defer q.mu.Unlock()
	if !quiet {
		delete(q.apps, ctl)
		return
	}
	if q.apps == nil {
		q.apps = map[*appCtl]time.Time{}
	}
	q.apps[ctl] = at
	if !q.run {
		q.run = true
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.sweepQuiet() }()
	}
}

// sweepQuiet is the sweep: every tick it reads the load of the quiet apps
// and pokes those with traffic (their traffic channel), which leave the
// set until their next quiet round. It ends with the Manager.
func (m *Manager) sweepQuiet() {
	t := m.clock.NewTimer(tick)
	defer t.Stop()
	var apps []*appCtl
	var ats []time.Time
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C():
		}
		apps, ats = apps[:0], ats[:0]
		m.quiet.mu.Lock()
		for ctl, at := range m.quiet.apps {
			apps = append(apps, ctl)
			ats = append(ats, at)
		}
		m.quiet.mu.Unlock()
		for i, ctl := range apps {
			if quietEnded(m.o.Router.Load(ctl.name), ats[i]) {
				m.quiet.mu.Lock()
				if m.quiet.apps[ctl] == ats[i] {
					delete(m.quiet.apps, ctl)
				}
				m.quiet.mu.Unlock()
				poke(ctl.traffic)
			}
		}
		t.Reset(tick)
	}
}
