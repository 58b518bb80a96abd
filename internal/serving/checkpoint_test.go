package serving

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/node"
)

// ckptNode is a local node that takes checkpoints the fake way: a dump
// writes a folder and ends the container, as CRIU does.
type ckptNode struct {
	*localnode.Node
	h    *harness
	dir  string
	fail bool // dumps fail
}

func (n *ckptNode) CheckpointUsable(context.Context) error { return nil }

func (n *ckptNode) Checkpoint(_ context.Context, id, dir string) error {
	if n.fail {
		return fmt.Errorf("replica %s: criu: Dump files failed", id)
	}
	p := filepath.Join(n.dir, dir)
	if err := os.MkdirAll(p, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(p, "inventory.img"), []byte(id), 0o600); err != nil {
		return err
	}
	n.h.rt.exit(id, 137)
	return nil
}

func (n *ckptNode) DropCheckpoint(dir string) error { return os.RemoveAll(filepath.Join(n.dir, dir)) }

// newCkptHarness is a harness whose node takes checkpoints.
func newCkptHarness(t *testing.T) (*harness, *ckptNode) {
	t.Helper()
	var cn *ckptNode
	h := newHarnessOpts(t, func(o *testOpts) {
		o.WrapLocal = func(h *harness, n *localnode.Node) Node {
			cn = &ckptNode{Node: n, h: h, dir: o.Dir}
			return cn
		}
	})
	return h, cn
}

// checkpoints lists the checkpoint folders on the fake node's disk.
func (n *ckptNode) checkpoints(t *testing.T) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(n.dir, checkpointsDir, "*", "*"))
	return m
}

// eventsOf is the messages of the events of kind recorded so far.
func (h *harness) eventsOf(kind string) []string {
	h.t.Helper()
	h.recorded()
	var out []string
	for _, e := range h.ev.of(kind) {
		out = append(out, e.Reason)
	}
	return out
}

// The checkpoint tier: a replica frozen for freeze_timeout is dumped to
// disk and ends; the next request restores it (its revision, its app)
// rather than booting; the checkpoint restores once and is gone.
func TestCheckpointTier(t *testing.T) {
	h, cn := newCkptHarness(t)
	h.deploy(`idle_timeout = "30s"` + "\n" + `freeze_timeout = "10m"` + "\ncheckpoint = true")
	h.m.Activate("hello")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	first := h.replicas()[StateReady][0]
	h.advance(30 * time.Second)
	h.wait("frozen", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.advance(10 * time.Minute)
	h.wait("checkpointed and removed", func() bool { return len(h.replicas()) == 0 && h.rt.count() == 0 })
	if ck := cn.checkpoints(t); len(ck) != 1 || !strings.HasSuffix(ck[0], "/hello/"+first) {
		t.Fatalf("checkpoints on disk: %v, want hello/%s", ck, first)
	}
	if ev := h.eventsOf("checkpoint"); len(ev) != 1 || !strings.Contains(ev[0], "checkpointed to disk") {
		t.Fatalf("checkpoint events: %q", ev)
	}
	h.m.Activate("hello")
	h.wait("restored and ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	c, err := h.rt.get(id)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cn.dir, ".checkpoints", "hello", first); c.spec.RestoreFrom != want {
		t.Fatalf("second replica started with RestoreFrom %q, want %q", c.spec.RestoreFrom, want)
	}
	ctl := h.m.app("hello")
	ctl.mu.Lock()
	for _, r := range ctl.reps {
		// Its record says it was restored, so that a restarted daemon
		// still checkpoints it however fast its restore was.
		if r.rec.ID == id && (!r.rec.Restored || !ctl.slowBoot(r)) {
			t.Errorf("restored replica %s: record Restored %v, slowBoot %v", id, r.rec.Restored, ctl.slowBoot(r))
		}
	}
	ctl.unlock()
	h.wait("the checkpoint, used, is dropped", func() bool { return len(cn.checkpoints(t)) == 0 })
	if ev := h.eventsOf("checkpoint"); len(ev) != 2 || !strings.Contains(ev[1], "restored from the checkpoint of "+first) {
		t.Fatalf("checkpoint events: %q", ev)
	}
}

// A failed restore boots the replica instead, with an event naming the
// reason; a failed dump stops it as before, with an event.
func TestCheckpointFallbacks(t *testing.T) {
	h, cn := newCkptHarness(t)
	h.deploy(`idle_timeout = "30s"` + "\n" + `freeze_timeout = "10m"` + "\ncheckpoint = true")
	cycle := func() {
		h.m.Activate("hello")
		h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
		h.advance(30 * time.Second)
		h.wait("frozen", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
		h.advance(10 * time.Minute)
		h.wait("stopped and removed", func() bool { return len(h.replicas()) == 0 && h.rt.count() == 0 })
	}
	cycle()
	h.rt.mu.Lock()
	h.rt.failRestore = true
	h.rt.mu.Unlock()
	h.m.Activate("hello")
	h.wait("booted after the failed restore", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	if c, _ := h.rt.get(id); c == nil || c.spec.RestoreFrom != "" {
		t.Fatalf("replica after a failed restore: %+v", c)
	}
	ev := h.eventsOf("checkpoint")
	if len(ev) != 2 || !strings.Contains(ev[1], "restore failed, booting instead") || !strings.Contains(ev[1], "criu failed") {
		t.Fatalf("checkpoint events: %q", ev)
	}
	h.wait("the checkpoint is dropped", func() bool { return len(cn.checkpoints(t)) == 0 })

	cn.fail = true
	h.advance(30 * time.Second)
	h.wait("frozen", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.advance(10 * time.Minute)
	h.wait("stopped after the failed dump", func() bool { return len(h.replicas()) == 0 && h.rt.count() == 0 })
	ev = h.eventsOf("checkpoint")
	if len(ev) != 3 || !strings.Contains(ev[2], "checkpoint failed, stopped instead") {
		t.Fatalf("checkpoint events: %q", ev)
	}
	if ck := cn.checkpoints(t); len(ck) != 0 {
		t.Fatalf("checkpoints after a failed dump: %v", ck)
	}
}

// [scale] checkpoint = false: the frozen replica stops, no dump.
func TestCheckpointOptOut(t *testing.T) {
	h, cn := newCkptHarness(t)
	h.deploy(`idle_timeout = "30s"` + "\n" + `freeze_timeout = "10m"` + "\ncheckpoint = false")
	h.m.Activate("hello")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	h.advance(30 * time.Second)
	h.wait("frozen", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.advance(10 * time.Minute)
	h.wait("stopped", func() bool { return len(h.replicas()) == 0 && h.rt.count() == 0 })
	if ck := cn.checkpoints(t); len(ck) != 0 {
		t.Fatalf("an app with checkpoint = false was checkpointed: %v", ck)
	}
	if ev := h.eventsOf("checkpoint"); len(ev) != 0 {
		t.Fatalf("checkpoint events: %q", ev)
	}
}

// A checkpoint is never restored into another revision: a deploy's new
// revision boots, and the old checkpoint is dropped; nor kept past the
// app's removal.
func TestCheckpointOtherRevisionAndRemove(t *testing.T) {
	h, cn := newCkptHarness(t)
	h.deploy(`idle_timeout = "30s"` + "\n" + `freeze_timeout = "10m"` + "\ncheckpoint = true")
	h.m.Activate("hello")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	h.advance(30 * time.Second)
	h.wait("frozen", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.advance(10 * time.Minute)
	h.wait("checkpointed", func() bool { return len(h.replicas()) == 0 && len(cn.checkpoints(t)) == 1 })
	h.deploy(`idle_timeout = "31s"` + "\n" + `freeze_timeout = "10m"` + "\ncheckpoint = true")
	h.m.Activate("hello")
	// Until revision 2 is ready, traffic stays on revision 1, which the
	// activation may start (from its checkpoint): wait for revision 2's.
	var id string
	h.wait("revision 2 ready", func() bool {
		for _, r := range h.replicas()[StateReady] {
			if c, _ := h.rt.get(r); c != nil && c.spec.Labels["shoal.revision"] == "2" {
				id = r
				return true
			}
		}
		return false
	})
	if c, _ := h.rt.get(id); c == nil || c.spec.RestoreFrom != "" {
		t.Fatalf("revision 2's replica restored from revision 1's checkpoint: %+v", c)
	}
	h.wait("the other revision's checkpoint is dropped", func() bool { return len(cn.checkpoints(t)) == 0 })
	h.advance(31 * time.Second)
	h.wait("frozen", func() bool { r := h.replicas(); return len(r[StateFrozen]) >= 1 && len(r[StateReady]) == 0 })
	h.advance(10 * time.Minute)
	// A newer checkpoint replaces the app's older one: one at most.
	h.wait("checkpointed", func() bool { return len(h.replicas()) == 0 && len(cn.checkpoints(t)) == 1 })
	if err := h.m.Remove(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	h.wait("dropped with the app", func() bool { return len(cn.checkpoints(t)) == 0 })
}

// With [scale] checkpoint unset, only a replica whose boot was slow is
// checkpointed: one that was ready at once is stopped (a boot, or its
// premade sandbox, is the faster start), one that took checkpointMinBoot
// or more is dumped.
func TestCheckpointOnlySlowBootsByDefault(t *testing.T) {
	h, cn := newCkptHarness(t)
	h.deploy(`idle_timeout = "30s"` + "\n" + `freeze_timeout = "10m"`)
	h.m.Activate("hello")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	h.advance(30 * time.Second)
	h.wait("frozen", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.advance(10 * time.Minute)
	h.wait("stopped", func() bool { return len(h.replicas()[StateFrozen]) == 0 })
	if ck := cn.checkpoints(t); len(ck) != 0 {
		t.Fatalf("a replica ready at once was checkpointed: %v", ck)
	}
	if ev := h.eventsOf("checkpoint"); len(ev) != 0 {
		t.Fatalf("checkpoint events for a fast boot: %q", ev)
	}

	// A slow boot: the health check holds the replica back while the
	// clock passes checkpointMinBoot.
	h, cn = newCkptHarness(t)
	h.held.Store(true)
	h.deploy(`idle_timeout = "30s"`+"\n"+`freeze_timeout = "10m"`, "[health]\nhttp = \"/held\"")
	h.m.Activate("hello")
	h.wait("a replica starting", func() bool { return len(h.replicas()[StateStarting]) == 1 })
	h.advance(checkpointMinBoot)
	h.held.Store(false)
	for i := 0; i < 100 && len(h.replicas()[StateReady]) == 0; i++ {
		h.advance(100 * time.Millisecond) // the next probes
	}
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	slow := h.replicas()[StateReady][0]
	h.advance(30 * time.Second)
	h.wait("frozen", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.advance(10 * time.Minute)
	h.wait("checkpointed", func() bool { return len(cn.checkpoints(t)) == 1 })
	if ck := cn.checkpoints(t); !strings.HasSuffix(ck[0], "/hello/"+slow) {
		t.Fatalf("checkpoints on disk: %v, want hello/%s", ck, slow)
	}
}

// premakeNode is a checkpointing node that makes premade replicas (as
// Start does, its Boot a no-op) and records their specs.
type premakeNode struct {
	*ckptNode
	mu    sync.Mutex
	specs []ReplicaSpec
}

func (n *premakeNode) Premake(ctx context.Context, s ReplicaSpec) (node.Premade, error) {
	n.mu.Lock()
	n.specs = append(n.specs, s)
	n.mu.Unlock()
	st, err := n.Start(ctx, s)
	return node.Premade{Started: st}, err
}

func (n *premakeNode) Boot(context.Context, string) error { return nil }

func (n *premakeNode) premade() []ReplicaSpec {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]ReplicaSpec(nil), n.specs...)
}

// A premade replica of an app that may be checkpointed is made
// checkpointable, as a replica booted the ordinary way is: the start that
// takes it must be dumpable when it goes idle, or an app whose premade
// sandbox was ready first never reached the checkpoint tier ("not made
// checkpointable"). One of an app that opted out is not.
func TestPremadeReplicaCheckpointable(t *testing.T) {
	for _, c := range []struct {
		scale string
		want  bool
	}{{"checkpoint = true", true}, {"checkpoint = false", false}} {
		var pn *premakeNode
		h := newHarnessOpts(t, func(o *testOpts) {
			o.Premade = 1
			o.WrapLocal = func(h *harness, n *localnode.Node) Node {
				pn = &premakeNode{ckptNode: &ckptNode{Node: n, h: h, dir: o.Dir}}
				return pn
			}
		})
		h.deploy(`idle_timeout = "30s"` + "\n" + c.scale)
		h.wait("a premade replica", func() bool { return len(pn.premade()) == 1 })
		if got := pn.premade()[0].Checkpointable; got != c.want {
			t.Errorf("%s: premade replica made with Checkpointable %v, want %v", c.scale, got, c.want)
		}
	}
}
