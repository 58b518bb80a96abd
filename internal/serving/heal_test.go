package serving

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/network"
)

// gateNet is fakeNet whose Acquire holds every replica after the first
// until the gate opens, so a replacement stays starting.
type gateNet struct {
	fakeNet
	n    atomic.Int32
	gate chan struct{}
}

func (g *gateNet) Acquire(ctx context.Context, id string, mode network.Mode) (*network.Attachment, error) {
	if g.n.Add(1) > 1 {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.fakeNet.Acquire(ctx, id, mode)
}

// A replica that had served and dies is out of the route at once and its
// replacement starts without a back-off; what is left of the dead one is
// removed only once the replacement has started (or after bootWait), so
// the removal does not slow the start down.
func TestDeadReplicaRemovedAfterItsReplacementStarts(t *testing.T) {
	for _, open := range []bool{true, false} {
		name := "replacement starts"
		if !open {
			name = "replacement stuck"
		}
		t.Run(name, func(t *testing.T) {
			g := &gateNet{gate: make(chan struct{})}
			h := newHarnessWith(t, 1<<40, g)
			t.Cleanup(func() {
				select {
				case <-g.gate:
				default:
					close(g.gate)
				}
			})
			h.deploy("min = 1\nmax = 1")
			h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
			old := h.replicas()[StateReady][0]
			h.advance(time.Second) // it served: no back-off
			h.rt.exit(old, 137)
			h.wait("the replacement is starting", func() bool { return len(h.replicas()[StatePending]) == 1 })
			if eps := h.r.endpoints("hello"); len(eps) != 0 {
				t.Fatalf("the dead replica is still routed: %v", eps)
			}
			time.Sleep(20 * time.Millisecond)
			if _, err := h.rt.get(old); err != nil {
				t.Fatalf("the dead replica was removed while its replacement started: %v", err)
			}
			removed := func() bool { _, err := h.rt.get(old); return err != nil }
			if open {
				close(g.gate)
				h.wait("the replacement is ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
				h.wait("the dead replica is removed", removed)
				return
			}
			h.clock.Advance(bootWait)
			h.wait("the dead replica is removed after bootWait", removed)
		})
	}
}
