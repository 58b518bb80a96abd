package serving

import "time"

// A wake-up of an app this Manager does not run (yet) is kept, not
// dropped: the proxy has a route and a request for an app whose
// controller is not loaded yet (the daemon's start, while it loads the
// apps; a new leader while it takes the lead; a deploy under way), and it
// has had its 202. The controller gets it when it starts, so that the
// request waiting in the proxy's queue is served. At most maxKeptWakes are
// kept, each for keptWakeFor (past the proxy's queue timeout, by when
// nobody waits for it any more).
const (
	keptWakeFor  = time.Minute
	maxKeptWakes = 4096
)

// keepWake keeps a wake-up of app, which has no controller; m.mu is held.
// Of several, the first's time is kept (the start gate's order), unless it
// lapsed: a new wake-up then replaces it.
func (m *Manager) keepWake(app string) {
	now := m.clock.Now()
	if at, ok := m.wakes[app]; ok && now.Sub(at) < keptWakeFor {
		return
	}
	if m.wakes == nil {
		m.wakes = map[string]time.Time{}
	}
	if len(m.wakes) >= maxKeptWakes {
		for name, at := range m.wakes {
			if now.Sub(at) >= keptWakeFor {
				delete(m.wakes, name)
			}
		}
		if len(m.wakes) >= maxKeptWakes {
			m.log.Warn("serving: too many wake-ups of apps not loaded; one dropped", "app", app)
			return
		}
	}
	m.wakes[app] = now
}

// takeWake removes the wake-up kept for app and returns when it came,
// unless none came within keptWakeFor; m.mu is held.
func (m *Manager) takeWake(app string) (time.Time, bool) {
	at, ok := m.wakes[app]
	if !ok {
		return time.Time{}, false
	}
	delete(m.wakes, app)
	return at, m.clock.Now().Sub(at) < keptWakeFor
}

// addApp makes ctl the controller of its app and hands it the wake-up kept
// for the app, if any; m.mu is held.
func (m *Manager) addApp(ctl *appCtl) {
	m.apps[ctl.name] = ctl
	if at, ok := m.takeWake(ctl.name); ok {
		ctl.activate(at)
	}
}

// activate marks ctl woken at at (a request waits since then) and pokes
// its loop.
func (ctl *appCtl) activate(at time.Time) {
	if !ctl.woken.Load() {
		ctl.wokenAt.Store(at.UnixNano())
	}
	ctl.woken.Store(true)
	poke(ctl.wake)
}
