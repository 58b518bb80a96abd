package serving

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
)

// At most eventsPerApp events of one app are recorded in an eventWindow;
// the others are counted by kind and told in one event of kind "summary"
// when the window ends, so that one noisy app cannot push the other apps'
// events out of the log (nor cost a store write each). The kinds in
// stateEvents tell a change of an app's state, happen a few times at most
// (and some, like "waiting", only when something changes): they are never
// limited nor counted, so status and whoever waits for them always see them.
const (
	eventsPerApp = 60
	eventWindow  = time.Minute
)

// stateEvents are the kinds the limit never drops.
var stateEvents = map[string]bool{
	"deploy": true, "rollback": true, "rollout": true, "remove": true, "lost": true, "waiting": true,
	"reseed": true, "merge-failed": true, "checkpoint": true, "warning": true,
}

// appEvents is one app's window of events.
type appEvents struct {
	from  time.Time      // the window's start
	n     int            // events recorded in it
	more  map[string]int // events not recorded, by kind
	timer clock.Timer    // tells them at the window's end
}

// limit reports whether e may be recorded now; if not, it is counted in
// its app's summary. Events of no app, and stateEvents, always are.
func (x *eventQueue) limit(e types.Event) bool {
	if e.App == "" || x.clock == nil || stateEvents[e.Kind] {
		return true
	}
	x.limitMu.Lock()
	defer x.limitMu.Unlock()
	now := x.clock.Now()
	a := x.byApp[e.App]
	if a == nil || now.Sub(a.from) >= eventWindow {
		if a != nil {
			x.summaryLocked(e.App, a)
		} else if x.byApp == nil {
			x.byApp = map[string]*appEvents{}
		}
		x.pruneLocked(now)
		a = &appEvents{from: now}
		x.byApp[e.App] = a
	}
	if a.n < eventsPerApp {
		a.n++
		return true
	}
	if a.more == nil {
		a.more = map[string]int{}
	}
	a.more[e.Kind]++
	if a.timer == nil {
		app := e.App
		a.timer = x.clock.AfterFunc(a.from.Add(eventWindow).Sub(now), func() {
			x.limitMu.Lock()
			defer x.limitMu.Unlock()
			if x.byApp[app] == a {
				x.summaryLocked(app, a)
			}
		})
	}
	return false
}

// summaryLocked queues the summary of a's events not recorded, if any.
// x.limitMu is held.
func (x *eventQueue) summaryLocked(app string, a *appEvents) {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	if len(a.more) == 0 {
		return
	}
	kinds := make([]string, 0, len(a.more))
	total := 0
	inputs := map[string]float64{}
	for k, n := range a.more {
		kinds = append(kinds, k)
		total += n
		inputs[k] = float64(n)
	}
	sort.Slice(kinds, func(i, j int) bool {
		return a.more[kinds[i]] > a.more[kinds[j]] || a.more[kinds[i]] == a.more[kinds[j]] && kinds[i] < kinds[j]
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d more %s events", a.more[k], k)
	}
	a.more = nil
	x.send(types.Event{Kind: "summary", App: app, Inputs: inputs,
		Reason: fmt.Sprintf("… and %s in the %s from %s (%d not recorded: at most %d events an app a %s)",
			strings.Join(parts, ", "), eventWindow, a.from.UTC().Format(time.TimeOnly), total, eventsPerApp, eventWindow)})
}

// pruneLocked forgets the windows over with nothing left to tell, once
// there are many. x.limitMu is held.
func (x *eventQueue) pruneLocked(now time.Time) {
	if len(x.byApp) < 1024 {
		return
	}
	for app, a := range x.byApp {
		if now.Sub(a.from) >= eventWindow && len(a.more) == 0 {
			delete(x.byApp, app)
		}
	}
}
