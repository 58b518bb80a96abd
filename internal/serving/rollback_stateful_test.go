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

// A stateful app's rollback the operator asked for is never undone: when
// the revision it goes back to fails before it is ready `failures` times,
// the rollback ends failed, the app stays on that revision with the
// error in its status and an event, and its ordinals never roll forward
// to the revision it left.
func TestStatefulRollbackFailureIsNotUndone(t *testing.T) {
	h := newHarness(t)
	stateful := "[stateful]\nreplicas = 2\n[volumes]\ndata = \"/data\""
	health := "[health]\nhttp = \"/held\"\nstart_timeout = \"2s\"\nfailures = 1"
	h.deploy("", stateful, env("1"), health)
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
	h.advanceUntil("2 ordinals of revision 1 ready", 100*time.Millisecond, func() bool { return onRev(1) })
	h.deploy("", stateful, env("2"), health)
	h.advanceUntil("2 ordinals of revision 2 ready", 100*time.Millisecond, func() bool { return onRev(2) })
	h.held.Store(true) // revision 1 cannot pass its check
	if _, err := h.m.Rollback(context.Background(), "hello", types.RollbackRequest{To: 1}); err != nil {
		t.Fatal(err)
	}
	h.advanceUntil("the rollback ends", 100*time.Millisecond, func() bool {
		ro := h.app().Rollout
		return ro != nil && ro.State != types.RolloutProgressing
	})
	a := h.app()
	if a.Revision != 1 || a.Rollout.State != types.RolloutFailed || a.Rollout.Revision != 1 || a.Rollout.From != 2 ||
		!strings.Contains(a.Rollout.Reason, "failed before it was ready") {
		t.Fatalf("after the requested rollback to 1 failed: revision %d, rollout %+v", a.Revision, a.Rollout)
	}
	if a.Error == "" {
		t.Fatalf("the failed rollback's error is not in the app's status: %+v", a)
	}
	if ev := h.eventsOf("rollback"); len(ev) == 0 || !strings.Contains(ev[len(ev)-1], "rollback to revision 1 failed") {
		t.Fatalf("rollback events %q", ev)
	}
	// It stays on revision 1: no ordinal goes (back) to revision 2.
	for range 30 {
		h.advance(100 * time.Millisecond)
		if a := h.app(); a.Revision != 1 || a.Rollout.State != types.RolloutFailed {
			t.Fatalf("the failed rollback moved on: revision %d, rollout %+v", a.Revision, a.Rollout)
		}
		if r, ok := h.ordinalRevs()[1]; ok && r.Revision != 1 {
			t.Fatalf("ordinal 1 went back to revision %d after the failed rollback", r.Revision)
		}
	}
	// Once revision 1 passes its check, every ordinal runs it.
	h.held.Store(false)
	h.advanceUntil("2 ordinals of revision 1 ready again", 100*time.Millisecond, func() bool { return onRev(1) })
}
