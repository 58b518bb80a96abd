package serving

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/route"
)

// restartWith is restart with the new manager's options changed by opt.
func (h *harness) restartWith(opt func(o *Options)) {
	h.t.Helper()
	h.m.Close()
	o := h.m.o
	o.Registerer = prometheus.NewRegistry()
	opt(&o)
	m, err := New(h.withLocal(o))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.m = m
	h.t.Cleanup(m.Close)
}

// A frozen replica's freeze timer runs on across a restart from when it
// froze (kept in its record), rather than starting again: freezes spread
// over time do not all expire together after a restart.
func TestFreezeTimerKeptAcrossRestart(t *testing.T) {
	h := newHarness(t)
	h.deploy(`idle_timeout = "1s"` + "\n" + `freeze_timeout = "10m"`)
	h.m.Activate("hello")
	h.wait("a replica is ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	h.advanceUntil("the replica freezes", time.Second, func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.advance(6 * time.Minute)
	h.restart()
	h.wait("the frozen replica adopted", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.advance(4*time.Minute + time.Second)
	h.wait("the replica stops 10 minutes after it froze", func() bool {
		return len(h.replicas()) == 0 && h.rt.count() == 0
	})
}

// Frozen replicas a restarted daemon adopts count in the frozen-memory
// budget at what they hold: over a smaller budget, the least recently
// used is stopped, and no more than that. Each fake replica holds 1 MiB.
func TestAdoptedFrozenCountInBudget(t *testing.T) {
	h := newHarness(t)
	h.deploy("max = 2\ntarget_concurrency = 1\nidle_timeout = \"1s\"\nfreeze_timeout = \"1h\"")
	h.r.setLoad(route.Load{InFlight: 2})
	h.m.Activate("hello")
	h.advanceUntil("two ready", tick, func() bool { return len(h.replicas()[StateReady]) == 2 })
	h.r.setLoad(route.Load{})
	h.advanceUntil("both frozen", time.Second, func() bool { return len(h.replicas()[StateFrozen]) == 2 })
	h.restartWith(func(o *Options) { o.FrozenMemory = 1<<20 + 1 })
	h.wait("one of the adopted frozen replicas stops for the 1 MiB budget", func() bool {
		r := h.replicas()
		return len(r[StateFrozen]) == 1 && len(r) == 1 && h.rt.count() == 1
	})
}

// Budget checks at once (replicas freezing together) stop no more than the
// budget needs: each counts what the others stopped.
func TestFrozenBudgetChecksAtOnceDoNotOvershoot(t *testing.T) {
	h := newHarness(t)
	h.deploy("max = 4\ntarget_concurrency = 1\nidle_timeout = \"1s\"\nfreeze_timeout = \"1h\"")
	h.r.setLoad(route.Load{InFlight: 4})
	h.m.Activate("hello")
	h.advanceUntil("four ready", tick, func() bool { return len(h.replicas()[StateReady]) == 4 })
	h.r.setLoad(route.Load{})
	h.advanceUntil("all frozen", time.Second, func() bool { return len(h.replicas()[StateFrozen]) == 4 })
	h.m.o.FrozenMemory = 3<<20 + 1 // one replica over
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() { defer wg.Done(); h.m.enforceFrozenBudget() }()
	}
	wg.Wait()
	h.wait("one stopped", func() bool { return h.rt.count() == 3 })
	if r := h.replicas(); len(r[StateFrozen]) != 3 {
		t.Fatalf("replicas after budget checks at once: %v, want 3 frozen", r)
	}
}
