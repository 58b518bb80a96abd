package jobs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/store"
)

// A new leader continues from the records: it counts the slots the jobs
// assigned by the old one take, assigns what is queued, and the deposed
// leader's writes are refused.
func TestClusterLeaderChange(t *testing.T) {
	c := newTestCluster(t, Options{})
	n1, n2 := c.add("n1", 1), c.add("n2", 1)
	c.add("n3", 2)
	c.net.lead("n1")
	first := submit(t, n1, "a", 4)
	waitFor(t, "4 jobs running", func() bool { return c.countRunning() == 4 })
	old := fakeMember{net: c.net, self: "n1"}.Leading()
	c.net.lead("") // n1 is gone as leader; none yet
	more := submit(t, n2, "b", 2)
	// The deposed leader's fence refuses.
	if _, err := old.CompareAndSwap(context.Background(), store.JobKey(more[0].ID), 1, []byte("{}")); err == nil || !strings.Contains(err.Error(), cluster.ErrDeposed.Error()) {
		t.Fatalf("deposed write: %v", err)
	}
	c.net.lead("n2")
	// Every slot is taken: the new leader assigns nothing yet.
	c.mgrs["n2"].kickPass()
	for _, j := range more {
		if got, _ := n2.Get(context.Background(), j.ID); got.State != Queued || got.Node != "" {
			t.Fatalf("job %s assigned with no free slot: %+v", j.ID, got)
		}
	}
	run := c.running()
	c.finish(run["n3"][0])
	c.finish(run["n3"][1])
	waitFor(t, "the new leader's jobs on n3", func() bool {
		n := 0
		for _, j := range c.running()["n3"] {
			if j.Tenant == "b" {
				n++
			}
		}
		return n == 2
	})
	for _, js := range c.running() {
		for _, j := range js {
			c.finish(j)
		}
	}
	for _, j := range append(first, more...) {
		got, err := n1.Wait(context.Background(), j.ID)
		if err != nil || got.State != Done || got.Attempts != 1 {
			t.Fatalf("job %s: %+v, %v", j.ID, got, err)
		}
	}
}

// A leader deposed without knowing it assigns nothing: its fenced writes
// are refused, and the new leader assigns the queued jobs.
func TestClusterDeposedLeaderAssignsNothing(t *testing.T) {
	c := newTestCluster(t, Options{})
	n1 := c.add("n1", 1)
	c.add("n2", 1)
	c.net.lead("n1")
	c.net.mu.Lock()
	c.net.deposed = map[string]int{"n1": c.net.term}
	c.net.mu.Unlock()
	c.net.lead("") // a new term, no leader yet; n1 still believes it leads
	js := submit(t, n1, "a", 2)
	waitFor(t, "n1's assignment refused", func() bool {
		c.net.mu.Lock()
		defer c.net.mu.Unlock()
		return c.net.refused > 0
	})
	for _, j := range js {
		if got, _ := n1.Get(context.Background(), j.ID); got.Node != "" || got.State != Queued {
			t.Fatalf("job %s assigned by a deposed leader: %+v", j.ID, got)
		}
	}
	c.net.lead("n2")
	waitFor(t, "both jobs running under the new leader", func() bool { return c.countRunning() == 2 })
}

// A leader cut off from the store gives up a fenced write after cluster.WriteBound
// and ends its pass with the job still queued; once the store answers, a
// later pass assigns it.
func TestClusterLeaderWriteBounded(t *testing.T) {
	c := newTestCluster(t, Options{})
	n1 := c.add("n1", 1)
	c.net.mu.Lock()
	c.net.hang = true
	c.net.mu.Unlock()
	c.net.lead("n1")
	j := submit(t, n1, "a", 1)[0]
	count := func() (hung, gaveUp int) {
		c.net.mu.Lock()
		defer c.net.mu.Unlock()
		return c.net.hung, c.net.gaveUp
	}
	waitFor(t, "the assignment blocked", func() bool { h, _ := count(); return h == 1 })
	c.clk.Advance(cluster.WriteBound - time.Millisecond)
	if _, g := count(); g != 0 {
		t.Fatalf("the write gave up before cluster.WriteBound: %d", g)
	}
	c.clk.Advance(time.Millisecond)
	waitFor(t, "the blocked write given up", func() bool { _, g := count(); return g == 1 })
	if got, _ := n1.Get(context.Background(), j.ID); got.State != Queued || got.Node != "" {
		t.Fatalf("job after the write was given up: %+v", got)
	}
	c.net.mu.Lock()
	c.net.hang = false
	c.net.mu.Unlock()
	// The next pass, on the next tick, assigns the job.
	waitFor(t, "the job running", func() bool {
		c.clk.Advance(time.Second)
		return c.countRunning() == 1
	})
}
