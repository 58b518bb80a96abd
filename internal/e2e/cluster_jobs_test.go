package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
	"github.com/shoal-run/shoal/internal/image/imagetest"
)

// busybox builds a busybox image tagged tag on the node.
func (nd *clusterNode) busybox(tag string) {
	t := nd.c.t
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := imagetest.BusyboxDir(dir); err != nil {
		t.Fatalf("busybox-static is needed: %v", err)
	}
	if r := nd.shoal("image", "build", dir, "--tag", tag, "--cmd", "/bin/sh"); r.code != 0 {
		t.Fatalf("image build on %s: exit %d: %s", nd.name, r.code, r.stderr)
	}
}

// job returns job id as nd shows it.
func (nd *clusterNode) job(id string, wait bool) types.Job {
	t := nd.c.t
	t.Helper()
	args := []string{"job", "get", "-o", "json", id}
	if wait {
		args = append(args, "--wait")
	}
	r := nd.shoal(args...)
	if r.code != 0 {
		t.Fatalf("job get %s on %s: exit %d: %s", id, nd.name, r.code, r.stderr)
	}
	return jobJSON(t, r.stdout)
}

// waitJob polls job id through nd until cond holds.
func (nd *clusterNode) waitJob(id, what string, cond func(types.Job) bool) types.Job {
	t := nd.c.t
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		j := nd.job(id, false)
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %s: not after 90s; last seen through %s: %+v", id, what, nd.name, j)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pidsWith returns the host pids whose command line holds marker.
func pidsWith(marker string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestClusterJobs runs the job queue of a three-node cluster: jobs submitted
// through one node run on every node (one slot each; the nodes without the
// image fetch it from the one that has it) and are seen through another; then the node running a job is killed with SIGKILL: the job is
// queued again with the reason, runs to the end on another node, the event
// log tells it, and the killed node, started again, leaves nothing of its
// copy running. Last, a job whose node is killed on both its attempts ends
// lost with the reason; one whose node stops gracefully runs on another
// node, the attempt not counted; one whose node is cut off from the network
// is killed there and runs on another node.
func TestClusterJobs(t *testing.T) {
	t.Setenv("SHOAL_JOB_SLOTS", "1")
	t.Setenv("SHOAL_JOB_WARM", "0")
	c := startCluster(t, 3)
	ready := map[string]string{"n1": cluster.StateReady, "n2": cluster.StateReady, "n3": cluster.StateReady}
	for _, nd := range c.nodes {
		nd.waitNodes("all ready, one leader", func(m map[string]types.Node) bool {
			return states(ready)(m) && clustertest.Leader(m) != ""
		})
	}
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	// Only n1 has the image: the others fetch it from n1 by its digest.
	n1.busybox("busybox:1")
	if r := n2.shoal("job", "submit", "busybox:1", "true"); r.code != 2 || !strings.Contains(r.stderr, `image "busybox:1" not found`) {
		t.Fatalf("submit through a node without the image: exit %d: %s", r.code, r.stderr)
	}

	// Six jobs through n1, a batch: the cluster's three slots take three at
	// once, one on each node.
	var reqs []types.JobRequest
	for i := range 6 {
		reqs = append(reqs, types.JobRequest{Image: "busybox:1", Tenant: "course",
			Steps: []types.JobStep{{Args: []string{"sh", "-c", fmt.Sprintf("sleep 1; echo job %d", i)}}}})
	}
	batch := filepath.Join(t.TempDir(), "batch.json")
	b, _ := json.Marshal(reqs)
	os.WriteFile(batch, b, 0o644)
	r := n1.shoal("job", "submit", "-f", batch)
	if r.code != 0 {
		t.Fatalf("job submit on n1: exit %d: %s", r.code, r.stderr)
	}
	ids := strings.Fields(r.stdout)
	if len(ids) != 6 {
		t.Fatalf("job submit printed %q, want 6 ids", r.stdout)
	}
	ran := map[string]int{}
	for i, id := range ids {
		j := n2.job(id, true)
		if j.State != types.JobDone || !j.OK || j.Attempts != 1 || j.Steps[0].Stdout != fmt.Sprintf("job %d\n", i) {
			t.Fatalf("job %s through n2: %+v", id, j)
		}
		ran[j.Node]++
	}
	if len(ran) != 3 || ran["n1"] == 0 || ran["n2"] == 0 || ran["n3"] == 0 {
		t.Fatalf("jobs ran per node %v, want some on each of n1, n2 and n3", ran)
	}
	// The nodes that lacked the image have it now, by n1's digest.
	var img types.Image
	json.Unmarshal([]byte(n1.shoal("image", "inspect", "busybox:1", "-o", "json").stdout), &img)
	for _, nd := range []*clusterNode{n2, n3} {
		if img.Digest == "" || nd.shoal("image", "inspect", img.Digest).code != 0 {
			t.Fatalf("node %s lacks image %q after running jobs of it", nd.name, img.Digest)
		}
	}
	ls := n3.shoal("job", "ls")
	if ls.code != 0 || !strings.Contains(ls.stdout, "NODE") || !strings.Contains(ls.stdout, ids[0]) {
		t.Fatalf("job ls on n3: exit %d:\n%s%s", ls.code, ls.stdout, ls.stderr)
	}

	// A job running on one node whose daemon is killed.
	marker := fmt.Sprintf("cjobs-%d", rand.Uint64())
	r = n1.shoal("job", "submit", "busybox:1", "sh", "-c", "sleep 6; echo "+marker)
	if r.code != 0 {
		t.Fatalf("job submit: exit %d: %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	j := n1.waitJob(id, "running", func(j types.Job) bool { return j.State == types.JobRunning })
	var victim, via *clusterNode
	for _, nd := range c.nodes {
		if nd.name == j.Node {
			victim = nd
		} else if via == nil {
			via = nd
		}
	}
	var pids []string
	deadline := time.Now().Add(30 * time.Second)
	for len(pids) == 0 && time.Now().Before(deadline) {
		pids = pidsWith(marker)
		time.Sleep(50 * time.Millisecond)
	}
	if len(pids) == 0 {
		t.Fatalf("no process of job %s (marker %s) found on the host", id, marker)
	}
	leader := ""
	if m, err := via.nodes(); err == nil {
		leader = clustertest.Leader(m)
	}
	victim.kill()
	t.Logf("killed %s (the leader was %s) running job %s (pids %v); watching through %s", victim.name, leader, id, pids, via.name)
	j = via.job(id, true)
	want := fmt.Sprintf("node %s lost while the job ran (attempt 1 of 2)", victim.name)
	if j.State != types.JobDone || !j.OK || j.Node == victim.name || j.Attempts != 2 || j.Requeued != want ||
		j.Steps[0].Stdout != marker+"\n" {
		t.Fatalf("job after its node was killed: %+v; want done on another node, requeued: %s", j, want)
	}
	r = via.shoal("events", "-o", "json")
	evs := parseEvents(t, r.stdout)
	found := false
	for _, e := range evs {
		found = found || (e.Kind == "job_requeued" && strings.Contains(e.Reason, id) && strings.Contains(e.Reason, "node "+victim.name+" lost"))
	}
	if !found {
		t.Fatalf("no job_requeued event for %s naming %s: %s", id, victim.name, r.stdout)
	}

	// The killed node comes back: nothing of its copy of the job is left
	// running, and it takes jobs again.
	victim.start()
	deadline = time.Now().Add(30 * time.Second)
	for left := pids; len(left) > 0; {
		left = nil
		for _, p := range pids {
			if _, err := os.Stat(filepath.Join("/proc", p)); err == nil {
				left = append(left, p)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the killed node's copy of job %s still run after it restarted", left, id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if again := victim.job(id, false); again.State != types.JobDone || again.Attempts != 2 {
		t.Fatalf("job %s after its first node came back: %+v", id, again)
	}

	// A job whose node is killed on each of its 2 attempts ends lost, with
	// the reason, and the event log says so.
	r = n1.shoal("job", "submit", "busybox:1", "sleep", "60") // n1 has the tag
	if r.code != 0 {
		t.Fatalf("job submit: exit %d: %s", r.code, r.stderr)
	}
	id = strings.TrimSpace(r.stdout)
	var killed []*clusterNode
	for attempt := 1; attempt <= 2; attempt++ {
		j := via.waitJob(id, fmt.Sprintf("running, attempt %d", attempt), func(j types.Job) bool {
			return j.State == types.JobRunning && j.Attempts == attempt
		})
		nd := c.nodeNamed(j.Node)
		nd.kill()
		killed = append(killed, nd)
		if nd == via {
			for _, o := range c.nodes {
				if o.Running() {
					via = o
				}
			}
		}
	}
	last := killed[1].name
	j = via.job(id, true)
	want = fmt.Sprintf("node %s lost while the job ran (attempt 2 of 2); not run again", last)
	if j.State != types.JobLost || j.Error != want || j.Node != last || j.Finished == nil {
		t.Fatalf("job killed twice: %+v; want lost: %s", j, want)
	}
	found = false
	evs = parseEvents(t, via.shoal("events", "-o", "json").stdout)
	for _, e := range evs {
		found = found || (e.Kind == "job_lost" && strings.Contains(e.Reason, id) && strings.Contains(e.Reason, want))
	}
	if !found {
		t.Fatalf("no job_lost event for %s", id)
	}
	// The killed nodes start again and remove what their copies left.
	for _, nd := range killed {
		nd.start()
	}

	// A node stopped gracefully (SIGTERM) while it runs a job queues it
	// again for the others, the attempt not counted.
	r = n1.shoal("job", "submit", "busybox:1", "sh", "-c", "sleep 4; echo after stop")
	if r.code != 0 {
		t.Fatalf("job submit: exit %d: %s", r.code, r.stderr)
	}
	id = strings.TrimSpace(r.stdout)
	j = n1.waitJob(id, "running", func(j types.Job) bool { return j.State == types.JobRunning })
	stopped := c.nodeNamed(j.Node)
	via = n1
	if stopped == n1 {
		via = n2
	}
	stopped.Stop()
	j = via.job(id, true)
	want = fmt.Sprintf("node %s stopped while the job ran", stopped.name)
	if j.State != types.JobDone || !j.OK || j.Node == stopped.name || j.Attempts != 1 || j.Requeued != want {
		t.Fatalf("job after its node stopped: %+v; want done elsewhere in 1 attempt, requeued: %s", j, want)
	}
	stopped.start()

	// A node cut off from the network while it runs a job kills its copy
	// (it cannot renew its lease); the job runs again on another node, and
	// the node, back on the network, leaves it alone.
	marker = fmt.Sprintf("cjobs-cut-%d", rand.Uint64())
	r = n1.shoal("job", "submit", "busybox:1", "sh", "-c", "sleep 6; echo "+marker)
	if r.code != 0 {
		t.Fatalf("job submit: exit %d: %s", r.code, r.stderr)
	}
	id = strings.TrimSpace(r.stdout)
	j = n1.waitJob(id, "running", func(j types.Job) bool { return j.State == types.JobRunning })
	cut := c.nodeNamed(j.Node)
	via = n1
	if cut == n1 {
		via = n2
	}
	pids = nil
	for deadline := time.Now().Add(30 * time.Second); len(pids) == 0 && time.Now().Before(deadline); {
		pids = pidsWith(marker)
		time.Sleep(50 * time.Millisecond)
	}
	if len(pids) == 0 {
		t.Fatalf("no process of job %s found on the host", id)
	}
	if err := cut.SetLink(false); err != nil {
		t.Fatal(err)
	}
	// The cut node's copy is gone before another node's starts: at no
	// time do both run.
	old := map[string]bool{}
	for _, p := range pids {
		old[p] = true
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var olds, news int
		for _, p := range pidsWith(marker) {
			if old[p] {
				olds++
			} else {
				news++
			}
		}
		if olds > 0 && news > 0 {
			t.Fatalf("job %s runs on two nodes at once: the cut node %s's copy and another", id, cut.name)
		}
		if news > 0 || (olds == 0 && via.job(id, false).State == types.JobDone) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: the cut node %s's copy runs still (%d), or none started elsewhere, after 30s", id, cut.name, olds)
		}
		time.Sleep(20 * time.Millisecond)
	}
	j = via.job(id, true)
	want = fmt.Sprintf("node %s lost while the job ran (attempt 1 of 2)", cut.name)
	if j.State != types.JobDone || !j.OK || j.Node == cut.name || j.Attempts != 2 || j.Requeued != want || j.Steps[0].Stdout != marker+"\n" {
		t.Fatalf("job after its node was cut off: %+v; want done elsewhere, requeued: %s", j, want)
	}
	if err := cut.SetLink(true); err != nil {
		t.Fatal(err)
	}
	via.waitNodes("the cut node ready again", func(m map[string]types.Node) bool { return m[cut.name].State == cluster.StateReady })
	if again := cut.job(id, false); again.State != types.JobDone || again.Node != j.Node || again.Attempts != 2 {
		t.Fatalf("job %s after its first node came back on the network: %+v", id, again)
	}
}

// nodeNamed returns the cluster's node of that name.
func (c *testCluster) nodeNamed(name string) *clusterNode {
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	c.t.Fatalf("no node %q", name)
	return nil
}
