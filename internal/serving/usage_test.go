package serving

import (
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// A ready replica with no requests and no CPU work has its counters read
// at a period that backs off to usageIdle, not every tick: idle replicas
// cost the daemon next to nothing. A request, or CPU work, brings the
// reading back to every round.
func TestUsageIdleBacksOff(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1", "[resources]\ncpu = 0.5\nmax_cpu = 2")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]

	before := h.rt.reads(id)
	for i := 0; i < 300; i++ { // 30 s
		h.advance(tick)
	}
	idle := h.rt.reads(id) - before
	if most := int(30*time.Second/usageIdle + usageSettle/tick + 10); idle > most {
		t.Fatalf("idle for 30 s: %d reads of the replica's counters, want at most %d", idle, most)
	}

	// Requests: every round reads.
	before = h.rt.reads(id)
	for i := 0; i < 10; i++ {
		now := h.clock.Now()
		h.r.setLoad(route.Load{LastRequest: now, Requests: uint64(i + 1),
			Endpoints: map[string]route.EndpointLoad{id: {LastRequest: now}}})
		h.advance(tick)
	}
	if n := h.rt.reads(id) - before; n < 10 {
		t.Fatalf("10 rounds with requests: %d reads, want 10", n)
	}

	// CPU work without requests, after a long idle spell: read again
	// within a second, and every round while the work goes on.
	for i := 0; i < 100; i++ {
		h.advance(tick)
	}
	h.rt.work(id, 10, 0)
	before = h.rt.reads(id)
	for i := 0; i < int(usageIdle/tick); i++ {
		h.advance(tick)
		if h.rt.reads(id) > before {
			break
		}
	}
	if h.rt.reads(id) == before {
		t.Fatalf("CPU work not read within %s", usageIdle)
	}
	before = h.rt.reads(id)
	for i := 0; i < 5; i++ {
		h.rt.work(id, 10, 0)
		h.advance(tick)
	}
	if n := h.rt.reads(id) - before; n < 5 {
		t.Fatalf("5 rounds of CPU work: %d reads, want 5", n)
	}
}

// A reading of a replica's CPU counters is stamped when it returned, not
// with the round's start: the decider judges the CPU time used over the
// span between two readings, so a read slower than the one before (here
// by a tick) stamped early makes a replica that used 80% of its quota
// look as if it used 160%, and its quota was raised for it.
func TestUsageStampedWhenRead(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\nmax = 1", "[resources]\ncpu = 0.3\nmax_cpu = 0.6")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	round := func(used time.Duration) {
		h.r.setLoad(route.Load{InFlight: 60, LastRequest: h.clock.Now(),
			Endpoints: map[string]route.EndpointLoad{id: {InFlight: 60, LastRequest: h.clock.Now()}}})
		h.rt.work(id, 10, 0)
		h.rt.use(id, used)
		h.advance(tick)
	}
	half := 15 * time.Millisecond // half of 0.3 cores over a tick
	for range 5 {
		round(half)
	}
	// 80% of its quota over two ticks, read a tick late.
	h.rt.mu.Lock()
	h.rt.onRead = func() {
		h.rt.mu.Lock()
		h.rt.onRead = nil
		h.rt.mu.Unlock()
		h.clock.Advance(tick)
	}
	h.rt.mu.Unlock()
	round(48 * time.Millisecond)
	for range 3 {
		round(half)
	}
	if _, ups := h.rt.cpu(id); len(ups) != 0 {
		t.Fatalf("quota changes %v for a replica that used at most 80%% of its quota", ups)
	}
}
