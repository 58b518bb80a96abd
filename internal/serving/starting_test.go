package serving

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/runtime"
)

// heldRuntime holds every container's start until its channel closes.
type heldRuntime struct {
	localnode.Runtime
	hold <-chan struct{}
}

func (r heldRuntime) Run(ctx context.Context, s runtime.Spec) (*runtime.Container, error) {
	<-r.hold
	return r.Runtime.Run(ctx, s)
}

// The route counts the replicas being started, so that the proxy holds
// requests while one is (route.Route.Starting): published when a start
// begins, before the start is done, and cleared with the ready replica's
// route.
func TestRouteCountsStartingReplicas(t *testing.T) {
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	h := newHarnessOpts(t, func(o *testOpts) { o.Runtime = heldRuntime{o.Runtime, hold} })
	t.Cleanup(release)
	h.deploy("min = 0\nmax = 2")
	h.m.Activate("hello")
	h.wait("a route counting the start", func() bool { return h.r.route("hello").Starting == 1 })
	if eps := h.r.route("hello").Endpoints; len(eps) != 0 {
		t.Fatalf("endpoints while starting: %v", eps)
	}
	release()
	h.wait("the ready route", func() bool { return len(h.r.route("hello").Endpoints) == 1 })
	if rt := h.r.route("hello"); rt.Starting != 0 {
		t.Fatalf("route with the ready replica counts %d starting, want 0", rt.Starting)
	}
}

// gatedRuntime holds a container's start while gate is set, until hold
// closes.
type gatedRuntime struct {
	localnode.Runtime
	gate *atomic.Bool
	hold <-chan struct{}
}

func (r gatedRuntime) Run(ctx context.Context, s runtime.Spec) (*runtime.Container, error) {
	if r.gate.Load() {
		<-r.hold
	}
	return r.Runtime.Run(ctx, s)
}

// A start tried again after a crash does not hold requests past their
// queue timeout: while the app is failing the route counts no start, so a
// replica that may never be healthy cannot hold a request for its whole
// start timeout (e2e TestAppHealthCheckFailure's request got no answer).
func TestRouteCountsNoStartWhileFailing(t *testing.T) {
	var gate atomic.Bool
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	h := newHarnessOpts(t, func(o *testOpts) { o.Runtime = gatedRuntime{o.Runtime, &gate, hold} })
	t.Cleanup(release)
	h.deploy("min = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	gate.Store(true)
	h.rt.exit(h.replicas()[StateReady][0], 3)
	h.wait("the crash is seen", func() bool { return len(h.replicas()[StateFailed]) == 1 })
	for len(h.replicas()[StatePending])+len(h.replicas()[StateStarting]) == 0 {
		h.advance(50 * time.Millisecond)
	}
	// The route is published after mu is released: read one made after
	// the new replica exists, not an older one still on its way.
	ctl := h.m.app("hello")
	ctl.mu.Lock()
	ctl.publish()
	want := ctl.pub.seq + 1
	ctl.unlock()
	h.wait("a route made after the new replica exists", func() bool {
		ctl.pub.mu.Lock()
		defer ctl.pub.mu.Unlock()
		return ctl.pub.done >= want
	})
	if rt := h.r.route("hello"); rt.Starting != 0 {
		t.Fatalf("a failing app's route counts %d starting, want 0", rt.Starting)
	}
	release()
	h.wait("the next replica is ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
}
