package serving

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// ordinalRevs maps each ordinal of app hello to its replica's revision
// and state.
func (h *harness) ordinalRevs() map[int]types.Replica {
	out := map[int]types.Replica{}
	for _, r := range h.app().Replicas {
		if r.Ordinal != nil {
			out[*r.Ordinal] = r
		}
	}
	return out
}

// A stateful app's rollback is a rolling one: its ordinals go back one at
// a time, highest first, and the rollback is reported done only once
// every ordinal runs the revision it went back to, not when it is asked.
func TestStatefulRollbackDoneWhenOrdinalsMoved(t *testing.T) {
	h := newHarness(t)
	stateful := "[stateful]\nreplicas = 2\n[volumes]\ndata = \"/data\""
	// Revision 1's replicas pass their health check only while held is
	// unset: the rollback is seen in progress however slow the host is.
	h.deploy("", stateful, env("1"), "[health]\nhttp = \"/held\"")
	onRev := func(rev int) bool {
		ords := h.ordinalRevs()
		if len(ords) != 2 {
			return false
		}
		for _, r := range ords {
			if r.Revision != rev || State(r.State) != StateReady {
				return false
			}
		}
		return true
	}
	done := func(rev int) bool {
		ro := h.app().Rollout
		return ro != nil && ro.Revision == rev && ro.State == types.RolloutDone
	}
	h.advanceUntil("2 ordinals of revision 1 ready", 100*time.Millisecond, func() bool { return onRev(1) && done(1) })
	h.deploy("", stateful, env("2"))
	h.advanceUntil("2 ordinals of revision 2 ready", 100*time.Millisecond, func() bool { return onRev(2) && done(2) })

	h.held.Store(true)
	a, err := h.m.Rollback(context.Background(), "hello", types.RollbackRequest{To: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a.Revision != 1 || a.Rollout == nil || a.Rollout.State != types.RolloutProgressing || a.Rollout.DoneAt != nil {
		t.Fatalf("just after the rollback, its ordinals all on revision 2: revision %d, rollout %+v", a.Revision, a.Rollout)
	}
	// Ordinal 1 goes first; it cannot be ready while held: the rollback
	// stays in progress.
	h.advanceUntil("ordinal 1 starts again on revision 1", 100*time.Millisecond, func() bool {
		r, ok := h.ordinalRevs()[1]
		return ok && r.Revision == 1
	})
	for range 5 {
		h.advance(100 * time.Millisecond)
	}
	if ro := h.app().Rollout; ro == nil || ro.State != types.RolloutProgressing || ro.Ready != 0 {
		t.Fatalf("ordinal 1 not ready, ordinal 0 on revision 2: rollout %+v; ordinals %+v", ro, h.ordinalRevs())
	}
	if r := h.ordinalRevs()[0]; r.Revision != 2 {
		t.Fatalf("ordinal 0 moved before ordinal 1 was ready: %+v", r)
	}
	h.held.Store(false)
	h.advanceUntil("the rollback is done", 100*time.Millisecond, func() bool { return done(1) })
	if !onRev(1) {
		t.Fatalf("the rollback is done with ordinals %+v", h.ordinalRevs())
	}
	ro := h.app().Rollout
	if ro.Ready != 2 || ro.Want != 2 || ro.From != 2 || !strings.Contains(ro.Reason, "2/2 ordinals on revision 1") {
		t.Fatalf("rollout when done: %+v", ro)
	}
}
