package serving

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/node"
)

// heldRemover is a local node that records the premade replicas it makes
// and holds the removal of app first's until released.
type heldRemover struct {
	*localnode.Node
	first   string
	release chan struct{}
	mu      sync.Mutex
	made    []string
}

func (n *heldRemover) Premake(ctx context.Context, s node.ReplicaSpec) (node.Premade, error) {
	n.mu.Lock()
	n.made = append(n.made, s.ID)
	n.mu.Unlock()
	return n.Node.Premake(ctx, s)
}

func (n *heldRemover) Remove(ctx context.Context, id string) error {
	if strings.HasPrefix(id, n.first+"-") {
		<-n.release
	}
	return n.Node.Remove(ctx, id)
}

func (n *heldRemover) premakes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.made...)
}

// The premade budget is a bound: with room for one, an app deployed after
// another takes the premade replica, yet its own is made only once the
// other's is removed, never beside it.
func TestPremadeBudgetNotPassedWhileEvicting(t *testing.T) {
	init := buildInit(t)
	hr := &heldRemover{first: "aaa", release: make(chan struct{})}
	h := newHarnessOpts(t, func(o *testOpts) {
		o.Premade, o.Init = 1, init
		o.WrapLocal = func(h *harness, n *localnode.Node) Node {
			hr.Node = n
			return hr
		}
	})
	t.Cleanup(func() {
		select {
		case <-hr.release:
		default:
			close(hr.release)
		}
	})
	deploy := func(name string) {
		m := fmt.Sprintf("name = %q\nimage = \"hello:1\"\nport = %d\n[scale]\nidle_timeout = \"30s\"\n", name, h.port)
		if _, err := h.m.Deploy(context.Background(), types.DeployRequest{Manifest: m}); err != nil {
			t.Fatalf("deploy %s: %v", name, err)
		}
	}
	// round has both controllers do a round at the clock's time.
	round := func() {
		at := h.clock.Now().UnixNano()
		for _, name := range []string{"aaa", "bbb"} {
			if ctl := h.m.app(name); ctl != nil {
				ctl.notify()
				h.wait(name+"'s round", func() bool { return ctl.roundAt.Load() >= at })
			}
		}
	}
	deploy("aaa")
	h.wait("aaa's premade replica", func() bool { return h.rt.count() == 1 })
	h.clock.Advance(tick) // bbb's deploy is a later use than aaa's
	deploy("bbb")
	h.wait("aaa's premade replica being removed", func() bool {
		ctl := h.m.app("aaa")
		ctl.mu.Lock()
		defer ctl.mu.Unlock()
		return ctl.premade == nil
	})
	// Its removal is held: bbb's waits for it.
	for range 20 {
		h.clock.Advance(tick)
		round()
	}
	for _, id := range hr.premakes() {
		if strings.HasPrefix(id, "bbb-") {
			t.Fatalf("bbb's premade replica %s was made while aaa's was still being removed: over the budget of 1", id)
		}
	}
	close(hr.release)
	h.wait("aaa's premade replica removed, bbb's made", func() bool {
		made := hr.premakes()
		return h.rt.count() == 1 && strings.HasPrefix(made[len(made)-1], "bbb-")
	})
}
