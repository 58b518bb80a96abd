package serving

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// admission admits the replica starts of this host by a measured budget:
// how many may be under way at once (limit) follows the time the node
// takes to start one, additive increase while starts take about as long
// as the fastest lately (base), multiplicative decrease when they take
// gateSlow times as long (once for the starts under way at a decrease): a burst of cold
// starts (a quiet night's first visits) queues here and drains at the
// rate the host starts containers, rather than piling up in the kernel,
// CNI and the runtime until every start is slow. Waiting starts go in
// order: those of apps with a request waiting for a replica first, the
// oldest waiting first, then the others in the order they came.
type admission struct {
	clock   clock.Clock
	mu      sync.Mutex
	limit   float64       // starts allowed at once
	running int           // starts admitted and not yet released
	base    time.Duration // the fastest start lately (drifting up)
	cutAt   time.Time     // the last decrease
	waiting []*gateWaiter // in admission order
	seq     uint64
}

// The gate's bounds, its first limit, and what counts as slow.
const (
	gateMin  = 2
	gateMax  = 64
	gateInit = 8
	gateSlow = 3 // a start taking more than gateSlow times base is contention
)

// gateWaiter is one start waiting for admission.
type gateWaiter struct {
	urgent bool      // a request waits for a replica of its app
	at     time.Time // since when that request waits, or when the start asked
	seq    uint64
	ok     chan struct{} // closed when admitted
}

func newAdmission(c clock.Clock) *admission { return &admission{clock: c, limit: gateInit} }

// before orders waiters: urgent first, then by at, then by arrival.
func (w *gateWaiter) before(o *gateWaiter) bool {
	if w.urgent != o.urgent {
		return w.urgent
	}
	if !w.at.Equal(o.at) {
		return w.at.Before(o.at)
	}
	return w.seq < o.seq
}

// acquire waits until a start may begin (urgent: a request waits for the
// app since at) and returns when it began, or false when ctx ends or stop
// is closed first.
func (g *admission) acquire(ctx context.Context, stop <-chan struct{}, urgent bool, at time.Time) (time.Time, bool) {
	g.mu.Lock()
	g.seq++
	w := &gateWaiter{urgent: urgent, at: at, seq: g.seq, ok: make(chan struct{})}
	i := sort.Search(len(g.waiting), func(i int) bool { return w.before(g.waiting[i]) })
	g.waiting = append(g.waiting, nil)
	copy(g.waiting[i+1:], g.waiting[i:])
	g.waiting[i] = w
	g.admitLocked()
	g.mu.Unlock()
	select {
	case <-w.ok:
		return g.clock.Now(), true
	case <-ctx.Done():
	case <-stop:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-w.ok: // admitted meanwhile: give the place back
		g.running--
		g.admitLocked()
	default:
		for i, x := range g.waiting {
			if x == w {
				g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
				break
			}
		}
	}
	return time.Time{}, false
}

// release ends a start admitted at began; a start that succeeded (ok)
// measures the host and moves the limit.
func (g *admission) release(began time.Time, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	if ok {
		now := g.clock.Now()
		took := now.Sub(began)
		switch {
		case g.base == 0 || took < g.base:
			g.base = took
		default:
			g.base += g.base / 64 // so that a host that got slower for good is learnt
		}
		if took <= gateSlow*g.base {
			g.limit = min(g.limit+1/g.limit, gateMax)
		} else if began.After(g.cutAt) {
			g.limit = max(g.limit*0.7, gateMin)
			g.cutAt = now
		}
	}
	g.admitLocked()
}

// admitLocked admits waiters, in order, while the limit allows. g.mu is
// held.
func (g *admission) admitLocked() {
	for len(g.waiting) > 0 && g.running < int(g.limit) {
		w := g.waiting[0]
		g.waiting = g.waiting[1:]
		g.running++
		close(w.ok)
	}
}

// state returns the gate's limit, starts under way and waiting, for
// metrics and tests.
func (g *admission) state() (limit float64, running, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit, g.running, len(g.waiting)
}
