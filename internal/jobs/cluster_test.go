package jobs

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/store"
)

// The leader shares the slots of the whole cluster between tenants by
// weight, whichever node a job was submitted through, and fills each
// node's free slots; every job runs once and its result is seen through
// any node.
func TestClusterFairShareAcrossNodes(t *testing.T) {
	c := newTestCluster(t, Options{Weights: map[string]float64{"b": 2}})
	n1, n2 := c.add("n1", 2), c.add("n2", 2)
	c.add("n3", 2)
	// Queued with no leader: the first assignment sees every job.
	ja := submit(t, n1, "a", 8)
	jb := submit(t, n2, "b", 8)
	c.net.lead("n1")
	waitFor(t, "6 jobs running", func() bool { return c.countRunning() == 6 })
	run := c.running()
	perTenant := map[string]int{}
	for node, js := range run {
		if len(js) != 2 {
			t.Errorf("node %s runs %d jobs, want its 2 slots full", node, len(js))
		}
		for _, j := range js {
			perTenant[j.Tenant]++
		}
	}
	// Weights 1 and 2 over 6 slots of the cluster: 2 and 4.
	if perTenant["a"] != 2 || perTenant["b"] != 4 {
		t.Fatalf("running per tenant %v, want a:2 b:4 (weights 1 and 2 over the cluster's 6 slots)", perTenant)
	}
	// Every job ends done, once, and waiting through another node sees it.
	ran := map[string]int{}
	for len(ran) < 16 {
		waitFor(t, "a running job", func() bool { return c.countRunning() > 0 })
		for _, js := range c.running() {
			for _, j := range js {
				ran[j.ID]++
				c.finish(j)
				if _, err := c.mgrs["n3"].Wait(context.Background(), j.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, j := range append(ja, jb...) {
		got, err := c.mgrs["n3"].Get(context.Background(), j.ID)
		if err != nil || got.State != Done || !got.OK || got.Attempts != 1 || got.Node == "" || ran[j.ID] != 1 {
			t.Fatalf("job %s: %+v, %v; started %d times", j.ID, got, err, ran[j.ID])
		}
	}
}

// A job goes only to a node with a free slot, and never to a draining
// node; a queued job waits for a slot and takes the first one freed.
func TestClusterAssignsToFreeSlots(t *testing.T) {
	c := newTestCluster(t, Options{})
	n1 := c.add("n1", 1)
	c.add("n2", 3)
	c.add("n3", 2)
	c.net.setLive(Node{Name: "n3", Slots: 2, Draining: true}, true)
	c.net.lead("n1")
	js := submit(t, n1, "a", 5)
	waitFor(t, "4 jobs running", func() bool { return c.countRunning() == 4 })
	run := c.running()
	if len(run["n1"]) != 1 || len(run["n2"]) != 3 || len(run["n3"]) != 0 {
		t.Fatalf("running by node: n1 %d n2 %d n3 %d, want 1, 3 and none on the draining n3", len(run["n1"]), len(run["n2"]), len(run["n3"]))
	}
	var waiting Job
	for _, j := range js {
		got, _ := n1.Get(context.Background(), j.ID)
		if got.State == Queued {
			waiting = got
		}
	}
	if waiting.ID == "" || waiting.Node != "" {
		t.Fatalf("the 5th job should wait for a slot with no node: %+v", waiting)
	}
	c.finish(run["n2"][0])
	j, err := n1.Wait(context.Background(), run["n2"][0].ID)
	if err != nil || j.State != Done || j.Node != "n2" {
		t.Fatalf("finished job: %+v, %v", j, err)
	}
	waitFor(t, "the waiting job on n2", func() bool {
		got, _ := n1.Get(context.Background(), waiting.ID)
		return got.State == Running && got.Node == "n2"
	})
}

// A lost node's running job is queued again with the reason, runs on a
// live node, and the lost node, still running it, kills it without
// storing its end; the change is an event.
func TestClusterNodeLostRequeues(t *testing.T) {
	c := newTestCluster(t, Options{MaxAttempts: 2})
	n1 := c.add("n1", 1)
	c.add("n2", 1)
	c.net.setLive(Node{Name: "n1", Slots: 1, Draining: true}, true)
	c.net.lead("n1")
	j := submit(t, n1, "a", 1)[0]
	if id := c.runners["n2"].waitStart(t); id != j.ID {
		t.Fatalf("n2 started %s, want %s", id, j.ID)
	}
	c.add("n3", 1)
	c.net.setLive(Node{Name: "n2"}, false)
	if id := c.runners["n3"].waitStart(t); id != j.ID {
		t.Fatalf("n3 started %s, want %s", id, j.ID)
	}
	got, _ := n1.Get(context.Background(), j.ID)
	if got.State != Running || got.Node != "n3" || got.Attempts != 2 || got.Requeued != "node n2 lost while the job ran (attempt 1 of 2)" {
		t.Fatalf("requeued job: %+v", got)
	}
	// n2 still ran it: it learns the job is no longer its own and kills it.
	waitFor(t, "n2's copy killed", func() bool {
		c.mgrs["n2"].m.mu.Lock()
		defer c.mgrs["n2"].m.mu.Unlock()
		return c.mgrs["n2"].m.live[j.ID] == nil
	})
	if got, _ := n1.Get(context.Background(), j.ID); got.State != Running || got.Node != "n3" {
		t.Fatalf("n2's killed copy changed the record: %+v", got)
	}
	c.finish(got)
	got, err := n1.Wait(context.Background(), j.ID)
	if err != nil || got.State != Done || got.Node != "n3" || got.Attempts != 2 {
		t.Fatalf("job: %+v, %v", got, err)
	}
	ev := c.net.eventLog()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "job_requeued: job "+j.ID) || !strings.Contains(ev[0], "node n2 lost") {
		t.Fatalf("events %q, want one job_requeued naming node n2", ev)
	}
}

// A job whose node is lost as many times as it may be tried ends lost with
// the reason, and waiters and the event log are told.
func TestClusterLostAfterAttempts(t *testing.T) {
	c := newTestCluster(t, Options{MaxAttempts: 2})
	n1 := c.add("n1", 1)
	c.net.setLive(Node{Name: "n1", Slots: 1, Draining: true}, true)
	c.add("n2", 1)
	c.net.lead("n1")
	j := submit(t, n1, "a", 1)[0]
	c.runners["n2"].waitStart(t)
	c.add("n3", 1)
	c.net.setLive(Node{Name: "n2"}, false)
	c.runners["n3"].waitStart(t)
	c.net.setLive(Node{Name: "n3"}, false)
	got, err := n1.Wait(context.Background(), j.ID)
	want := "node n3 lost while the job ran (attempt 2 of 2); not run again"
	if err != nil || got.State != Lost || got.Error != want || got.Node != "n3" || got.Finished == nil {
		t.Fatalf("job: %+v, %v; want lost: %s", got, err, want)
	}
	ev := c.net.eventLog()
	if len(ev) != 2 || !strings.HasPrefix(ev[1], "job_lost: job "+j.ID) {
		t.Fatalf("events %q, want job_requeued then job_lost", ev)
	}
}

// A job assigned to a node that is lost before it starts is queued again
// without counting an attempt.
func TestClusterAssignedNotStartedRequeued(t *testing.T) {
	c := newTestCluster(t, Options{})
	n1 := c.add("n1", 1)
	c.net.setLive(Node{Name: "n1", Slots: 1, Draining: true}, true)
	// n9 is live but has no Manager: what is assigned to it never starts.
	c.net.setLive(Node{Name: "n9", Slots: 1}, true)
	c.net.lead("n1")
	j := submit(t, n1, "a", 1)[0]
	waitFor(t, "assigned to n9", func() bool {
		got, _ := n1.Get(context.Background(), j.ID)
		return got.Node == "n9"
	})
	c.add("n2", 1)
	c.net.setLive(Node{Name: "n9"}, false)
	c.runners["n2"].waitStart(t)
	got, _ := n1.Get(context.Background(), j.ID)
	if got.Node != "n2" || got.Attempts != 1 || got.Requeued != "node n9 lost before the job started" {
		t.Fatalf("job: %+v", got)
	}
}

// A node that restarts finds jobs the store says it runs: they are queued
// again (the attempt counted) and run.
func TestClusterRestartedNodeRequeues(t *testing.T) {
	c := newTestCluster(t, Options{MaxAttempts: 2})
	now := c.clk.Now()
	req := hello("a")
	r := record{Job: Job{ID: "j00000000000000b1", Tenant: "a", Image: req.Image, State: Running, Attempts: 1,
		Submitted: now, Started: &now, Node: "n1"}, Req: &req, Seq: 1}
	b, _ := json.Marshal(r)
	if _, err := c.st.Put(context.Background(), store.JobKey(r.Job.ID), b); err != nil {
		t.Fatal(err)
	}
	n1 := c.add("n1", 1)
	c.net.lead("n1")
	c.runners["n1"].waitStart(t)
	got, _ := n1.Get(context.Background(), r.Job.ID)
	if got.State != Running || got.Attempts != 2 || got.Requeued != "node n1 restarted while the job ran (attempt 1 of 2)" {
		t.Fatalf("job: %+v", got)
	}
}

// A job running on one node is cancelled through another: its node kills
// it and stores it cancelled; a queued one is cancelled at once.
func TestClusterCancelThroughAnotherNode(t *testing.T) {
	c := newTestCluster(t, Options{})
	n1 := c.add("n1", 1)
	c.net.setLive(Node{Name: "n1", Slots: 1, Draining: true}, true)
	n2 := c.add("n2", 1)
	c.net.lead("n1")
	js := submit(t, n1, "a", 2)
	c.runners["n2"].waitStart(t)
	run := c.running()["n2"][0]
	got, err := n1.Cancel(context.Background(), run.ID)
	if err != nil || got.State != Cancelled || got.Node != "n2" {
		t.Fatalf("cancel running: %+v, %v", got, err)
	}
	other := js[0]
	if other.ID == run.ID {
		other = js[1]
	}
	// The second job takes the freed slot, or is cancelled first.
	got, err = n2.Cancel(context.Background(), other.ID)
	if err != nil || got.State != Cancelled {
		t.Fatalf("cancel second: %+v, %v", got, err)
	}
	if _, err := n1.Cancel(context.Background(), other.ID); err == nil {
		t.Fatal("cancelling an ended job should fail")
	}
}

// A job runs the image by the digest its submitting node resolved, on
// whatever node; the digest stays with the job when it is queued again.
func TestClusterRunsByDigest(t *testing.T) {
	c := newTestCluster(t, Options{ImageDigest: func(ctx context.Context, ref string) (string, error) {
		return "sha256:" + strings.Repeat("ab", 32), nil
	}})
	n1 := c.add("n1", 1)
	c.net.lead("n1")
	j := submit(t, n1, "a", 1)[0]
	c.runners["n1"].waitStart(t)
	fr := c.runners["n1"]
	fr.mu.Lock()
	img := fr.images[j.ID]
	fr.mu.Unlock()
	if img != "sha256:"+strings.Repeat("ab", 32) {
		t.Fatalf("ran image %q, want the stored digest", img)
	}
	if r := stored(t, c.st, j.ID); r.Digest != img || r.Req == nil || r.Req.Image != "busybox:1" {
		t.Fatalf("record: digest %q, request %+v", r.Digest, r.Req)
	}
	if got, _ := n1.Get(context.Background(), j.ID); got.Image != "busybox:1" {
		t.Fatalf("job shows image %q, want the ref submitted", got.Image)
	}
}

// A node whose lease is lost kills the jobs it runs without storing their
// end, and takes them back: queued again with the reason, the attempt
// counted, and run again.
func TestClusterLostLeaseTakesJobsBack(t *testing.T) {
	c := newTestCluster(t, Options{MaxAttempts: 3})
	n1 := c.add("n1", 1)
	c.net.lead("n1")
	j := submit(t, n1, "a", 1)[0]
	c.runners["n1"].waitStart(t)
	n1.LostLease()
	if id := c.runners["n1"].waitStart(t); id != j.ID {
		t.Fatalf("started %s again, want %s", id, j.ID)
	}
	got, _ := n1.Get(context.Background(), j.ID)
	if got.State != Running || got.Attempts != 2 || got.Requeued != "node n1 could not renew its lease while the job ran (attempt 1 of 3)" {
		t.Fatalf("job: %+v", got)
	}
}

// A node that stops gracefully queues its running jobs again for the
// other nodes, the attempt not counted.
func TestClusterStopRequeues(t *testing.T) {
	c := newTestCluster(t, Options{})
	n1 := c.add("n1", 1)
	c.net.setLive(Node{Name: "n1", Slots: 1, Draining: true}, true)
	n2 := c.add("n2", 1)
	c.net.lead("n1")
	j := submit(t, n1, "a", 1)[0]
	c.runners["n2"].waitStart(t)
	// Draining first, as a node that stops is taken out of the set the
	// leader assigns to: the job waits for another node.
	c.net.setLive(Node{Name: "n2", Slots: 1, Draining: true}, true)
	n2.Close()
	delete(c.mgrs, "n2")
	got, _ := n1.Get(context.Background(), j.ID)
	if got.State != Queued || got.Node != "" || got.Attempts != 0 || got.Requeued != "node n2 stopped while the job ran" {
		t.Fatalf("job after its node stopped: %+v", got)
	}
	c.net.setLive(Node{Name: "n2"}, false)
	c.add("n3", 1)
	c.runners["n3"].waitStart(t)
	got, _ = n1.Get(context.Background(), j.ID)
	if got.State != Running || got.Node != "n3" || got.Attempts != 1 {
		t.Fatalf("job on n3: %+v", got)
	}
}
