package serving

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/sandbox/stub/stubtest"
)

// slowPremaker is a local node whose Premake waits for the test: began
// gets each premade replica's id as its making begins; it is made once
// release is closed.
type slowPremaker struct {
	*localnode.Node
	began   chan string
	release chan struct{}
}

func (n *slowPremaker) Premake(ctx context.Context, s node.ReplicaSpec) (node.Premade, error) {
	n.began <- s.ID
	<-n.release
	return n.Node.Premake(ctx, s)
}

// buildInit builds shoal-init, which the node runs on the host as its
// replicas' log writer and premade replicas' pid 1, and returns its path.
func buildInit(t *testing.T) string {
	t.Helper()
	init := filepath.Join(t.TempDir(), "shoal-init")
	if err := stubtest.Build(init); err != nil {
		t.Fatal(err)
	}
	return init
}

// newSlowPremakeHarness is a harness whose apps at zero replicas keep a
// premade replica, made when the test says.
func newSlowPremakeHarness(t *testing.T) (*harness, *slowPremaker) {
	t.Helper()
	init := buildInit(t)
	sp := &slowPremaker{began: make(chan string, 8), release: make(chan struct{})}
	h := newHarnessOpts(t, func(o *testOpts) {
		o.Premade, o.Init = 4, init
		o.WrapLocal = func(h *harness, n *localnode.Node) Node {
			sp.Node = n
			return sp
		}
	})
	// Before the Manager closes (cleanups run last first), which waits
	// for the making of its premade replicas.
	t.Cleanup(func() {
		select {
		case <-sp.release:
		default:
			close(sp.release)
		}
	})
	return h, sp
}

// A start that comes while the app's premade replica is being made waits
// for it, rather than start a replica of its own: its making began first.
func TestStartWaitsForPremadeBeingMade(t *testing.T) {
	h, sp := newSlowPremakeHarness(t)
	h.deploy(`idle_timeout = "30s"`)
	var id string
	select {
	case id = <-sp.began:
	case <-time.After(60 * time.Second):
		t.Fatal("no premade replica is being made for the app at zero replicas")
	}
	h.m.Activate("hello")
	h.advance(premadeWait / 2)
	if n := h.rt.count(); n != 0 || len(h.replicas()) != 0 {
		t.Fatalf("while the premade replica is being made: %d containers, replicas %v; want the start to wait", n, h.replicas())
	}
	close(sp.release)
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	if got := h.replicas()[StateReady]; !slices.Equal(got, []string{id}) {
		t.Fatalf("ready replicas %v, want the premade one %s", got, id)
	}
	if n := h.rt.count(); n != 1 {
		t.Fatalf("%d containers, want the premade replica's only", n)
	}
}

// The wait is bounded: premadeWait after the premade replica's making
// began, a start waiting for it starts a replica of its own.
func TestStartWaitsForPremadeAtMostPremadeWait(t *testing.T) {
	h, sp := newSlowPremakeHarness(t)
	h.deploy(`idle_timeout = "30s"`)
	var id string
	select {
	case id = <-sp.began:
	case <-time.After(60 * time.Second):
		t.Fatal("no premade replica is being made for the app at zero replicas")
	}
	h.m.Activate("hello")
	h.advance(premadeWait / 2)
	if len(h.replicas()) != 0 {
		t.Fatalf("replicas %v before premadeWait, want none", h.replicas())
	}
	h.advance(premadeWait / 2)
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	if got := h.replicas()[StateReady]; got[0] == id {
		t.Fatalf("ready replica %s is the premade one, still being made", id)
	}
}
