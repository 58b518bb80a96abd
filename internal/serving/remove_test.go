package serving

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/runtime"
)

// flakyDelete is a runtime whose first fails Deletes fail, as a removal
// that finds a mount busy does; it records the clock's time of each.
type flakyDelete struct {
	localnode.Runtime
	clock interface{ Now() time.Time }
	fails atomic.Int32
	mu    sync.Mutex
	at    []time.Time
}

func (f *flakyDelete) Delete(ctx context.Context, id string) error {
	f.mu.Lock()
	f.at = append(f.at, f.clock.Now())
	f.mu.Unlock()
	if f.fails.Add(-1) >= 0 {
		return fmt.Errorf("container %q: delete: unmount rootfs: device or resource busy", id)
	}
	return f.Runtime.Delete(ctx, id)
}

func (f *flakyDelete) tries() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.at...)
}

// A replica whose removal fails is removed in the running daemon: the
// removal is tried again with back-off on the clock (1 s, 2 s, 4 s, ...)
// until it succeeds, not only by the next daemon at its start.
func TestRemoveRetriedWithBackoff(t *testing.T) {
	var fd *flakyDelete
	secrets := t.TempDir()
	h := newHarnessOpts(t, func(o *testOpts) {
		fd = &flakyDelete{Runtime: o.Runtime, clock: o.Clock}
		o.Runtime, o.SecretsDir = fd, secrets
	})
	h.deploy("min = 1\nmax = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	fd.fails.Store(3)
	if err := h.m.Remove(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	gone := func() bool { _, err := h.rt.get(id); return err != nil }
	if _, err := os.Stat(filepath.Join(secrets, id)); err != nil {
		t.Fatalf("the secrets of a replica whose delete failed went: %v", err)
	}
	if len(fd.tries()) != 1 || gone() {
		t.Fatalf("%d removals tried, container gone %v: want the one that failed", len(fd.tries()), gone())
	}
	// The clock moves by 100 ms at a time: an attempt is made at the
	// earliest when its back-off has passed (later on a busy host).
	for i := 0; i < 600 && !gone(); i++ {
		h.clock.Advance(100 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	if !gone() {
		t.Fatalf("the container is not removed after %d attempts in a minute of the clock", len(fd.tries()))
	}
	h.wait("its secrets folder is removed", func() bool {
		_, err := os.Stat(filepath.Join(secrets, id))
		return os.IsNotExist(err)
	})
	at := fd.tries()
	if len(at) != 4 {
		t.Fatalf("%d removals tried, want 4", len(at))
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if d := at[i+1].Sub(at[i]); d < want {
			t.Errorf("attempt %d came %s after the one before, want at least %s", i+2, d, want)
		}
	}
}

// startGate is a runtime whose Run of a replica waits until the gate
// opens; a Delete of a container whose Run has not returned is a conflict,
// as it is for the real runtime, and is counted.
type startGate struct {
	localnode.Runtime
	gate      chan struct{}
	mu        sync.Mutex
	running   map[string]bool // Runs under way
	conflicts int
}

func (g *startGate) Run(ctx context.Context, s runtime.Spec) (*runtime.Container, error) {
	g.mu.Lock()
	g.running[s.ID] = true
	g.mu.Unlock()
	<-g.gate
	defer func() {
		g.mu.Lock()
		delete(g.running, s.ID)
		g.mu.Unlock()
	}()
	return g.Runtime.Run(ctx, s)
}

func (g *startGate) Delete(ctx context.Context, id string) error {
	g.mu.Lock()
	creating := g.running[id]
	if creating {
		g.conflicts++
	}
	g.mu.Unlock()
	if creating {
		return fmt.Errorf("container %q is being created: %w", id, errdefs.ErrConflict)
	}
	return g.Runtime.Delete(ctx, id)
}

func (g *startGate) starting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.running)
}

// A replica stopped while its container is being made (its app deleted,
// or scaled down) is removed once the node's Start has returned, never
// while it runs: a Delete then found the container being created (a
// conflict) and the removal failed.
func TestRemoveWaitsForTheStart(t *testing.T) {
	var g *startGate
	h := newHarnessOpts(t, func(o *testOpts) {
		g = &startGate{Runtime: o.Runtime, gate: make(chan struct{}), running: map[string]bool{}}
		o.Runtime = g
	})
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(g.gate)
		}
	}
	t.Cleanup(open)
	h.deploy("min = 1\nmax = 1")
	h.wait("the container is being made", func() bool { return g.starting() == 1 })
	removed := make(chan error, 1)
	go func() { removed <- h.m.Remove(context.Background(), "hello") }()
	select {
	case err := <-removed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the app's removal waits for a start")
	}
	open()
	h.wait("the container is removed", func() bool { return g.starting() == 0 && h.rt.count() == 0 })
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conflicts != 0 {
		t.Fatalf("the container was deleted %d times while it was being created", g.conflicts)
	}
}
