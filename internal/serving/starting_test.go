package serving

import (
	"context"
	"sync"
	"testing"

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
