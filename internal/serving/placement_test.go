package serving

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/placement"
	"github.com/shoal-run/shoal/internal/route"
)

// Replicas of an app whose max_cpu is at most one core are pinned, each to
// another CPU; the CPU of a replica that goes is free for the next; the
// quota of a pinned replica still rises live up to max_cpu. An app that may
// use more than a core is not pinned.
func TestPlacementPinsSmallReplicas(t *testing.T) {
	cpus := placement.NewCPUs([]int{0, 1}, nil)
	h := newHarnessPlaced(t, 1<<40, fakeNet{}, cpus)
	h.deploy("min = 2\nmax = 2", "[resources]\ncpu = 0.25\nmax_cpu = 1")
	h.wait("two ready", func() bool { return len(h.replicas()[StateReady]) == 2 })
	ready := h.replicas()[StateReady]
	pinned := []string{h.rt.cpuset(ready[0]), h.rt.cpuset(ready[1])}
	slices.Sort(pinned)
	if !slices.Equal(pinned, []string{"0", "1"}) {
		t.Fatalf("two replicas pinned to %v, want one on each CPU", pinned)
	}
	a, _ := h.m.Get(h.m.ctx, "hello")
	for _, r := range a.Replicas {
		if r.CPUSet != h.rt.cpuset(r.ID) {
			t.Fatalf("status shows replica %s on cpuset %q, the runtime %q", r.ID, r.CPUSet, h.rt.cpuset(r.ID))
		}
	}

	// The replica on CPU 1 dies; its replacement gets CPU 1.
	victim := ready[0]
	if h.rt.cpuset(victim) != "1" {
		victim = ready[1]
	}
	h.advance(time.Second) // it served: no back-off
	h.rt.exit(victim, 137)
	h.wait("the replacement is ready", func() bool {
		r := h.replicas()[StateReady]
		return len(r) == 2 && !slices.Contains(r, victim)
	})
	for _, id := range h.replicas()[StateReady] {
		if !slices.Contains(ready, id) && h.rt.cpuset(id) != "1" {
			t.Fatalf("replacement %s pinned to %q, want the freed CPU 1", id, h.rt.cpuset(id))
		}
	}
	if l := cpus.Load(); l[0] != 1 || l[1] != 1 {
		t.Fatalf("placer's load %v after the replacement, want one replica per CPU", l)
	}

	// Throttled: the pinned replica's quota rises to max_cpu.
	id := h.replicas()[StateReady][0]
	h.advance(tick)
	h.advance(tick)
	for i := 0; i < 40; i++ {
		if q, _ := h.rt.cpu(id); q == 1 {
			break
		}
		h.rt.work(id, 10, 9)
		h.advance(tick)
	}
	if q, _ := h.rt.cpu(id); q != 1 {
		t.Fatalf("a throttled pinned replica's quota is %g, want max_cpu 1", q)
	}

	// Deleting the app frees its CPUs.
	if err := h.m.Remove(h.m.ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	h.wait("the replicas are gone", func() bool { return h.rt.count() == 0 })
	deadline := time.Now().Add(60 * time.Second)
	for l := cpus.Load(); l[0]+l[1] != 0; l = cpus.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("placer's load %v after the app was deleted", l)
		}
		time.Sleep(time.Millisecond)
	}
}

// A dead replica's replacement takes its CPU even when a round starts it
// while the route without the dead one is still being published (the
// dead one's place is released only then).
func TestPlacementReplacementWaitsForTheRelease(t *testing.T) {
	cpus := placement.NewCPUs([]int{0, 1}, nil)
	h := newHarnessPlaced(t, 1<<40, fakeNet{}, cpus)
	h.deploy("min = 2\nmax = 2", "[resources]\ncpu = 0.25\nmax_cpu = 1")
	h.wait("two ready", func() bool { return len(h.replicas()[StateReady]) == 2 })
	ready := h.replicas()[StateReady]
	victim := ready[0]
	if h.rt.cpuset(victim) != "1" {
		victim = ready[1]
	}
	h.advance(time.Second) // it served: no back-off

	// The route without the victim is held until a round has started the
	// replacement.
	held, proceed := make(chan struct{}), make(chan struct{})
	var once, let sync.Once
	t.Cleanup(func() { let.Do(func() { close(proceed) }) })
	gate := func(rt route.Route) {
		if rt.App == "hello" && len(rt.Endpoints) == 1 {
			once.Do(func() { close(held); <-proceed })
		}
	}
	h.r.gate.Store(&gate)
	h.rt.exit(victim, 137)
	<-held
	h.advance(tick)
	h.wait("the replacement is made", func() bool {
		a, _ := h.m.Get(h.m.ctx, "hello")
		return len(a.Replicas) == 3
	})
	time.Sleep(20 * time.Millisecond) // time for its start to go on, were it not to wait
	let.Do(func() { close(proceed) })
	h.wait("the replacement is ready", func() bool {
		r := h.replicas()[StateReady]
		return len(r) == 2 && !slices.Contains(r, victim)
	})
	for _, id := range h.replicas()[StateReady] {
		if !slices.Contains(ready, id) && h.rt.cpuset(id) != "1" {
			t.Fatalf("replacement %s pinned to %q, want the freed CPU 1", id, h.rt.cpuset(id))
		}
	}
}

// An app that may use more than one core is not pinned.
func TestPlacementLeavesLargeReplicas(t *testing.T) {
	h := newHarnessPlaced(t, 1<<40, fakeNet{}, placement.NewCPUs([]int{0, 1}, nil))
	h.deploy("min = 1", "[resources]\ncpu = 0.5\nmax_cpu = 2")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	if c := h.rt.cpuset(h.replicas()[StateReady][0]); c != "" {
		t.Fatalf("a replica with max_cpu 2 pinned to %q", c)
	}
}

// A restarted daemon's placer learns the CPUs of the replicas it adopts
// from their records, so a new replica goes to another CPU.
func TestPlacementSurvivesRestart(t *testing.T) {
	h := newHarnessPlaced(t, 1<<40, fakeNet{}, placement.NewCPUs([]int{0, 1}, nil))
	h.deploy("min = 1\nmax = 2", "[resources]\ncpu = 0.25\nmax_cpu = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	first := h.replicas()[StateReady][0]
	if c := h.rt.cpuset(first); c != "0" {
		t.Fatalf("first replica pinned to %q, want 0", c)
	}
	fresh := placement.NewCPUs([]int{0, 1}, nil)
	h.placer = fresh
	h.restart()
	h.wait("adopted", func() bool { return len(h.replicas()[StateReady]) == 1 })
	if l := fresh.Load(); l[0] != 1 || l[1] != 0 {
		t.Fatalf("the new placer's load after adoption: %v, want CPU 0 taken", l)
	}
	two := 2
	if _, err := h.m.Scale(h.m.ctx, "hello", types.ScaleRequest{Min: &two, Max: &two}); err != nil {
		t.Fatal(err)
	}
	h.wait("two ready", func() bool { return len(h.replicas()[StateReady]) == 2 })
	for _, id := range h.replicas()[StateReady] {
		if id != first && h.rt.cpuset(id) != "1" {
			t.Fatalf("the second replica went to %q, want the free CPU 1", h.rt.cpuset(id))
		}
	}
}
