package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/store"
)

// jobMembers is the cluster's membership as the job queue sees it
// (jobs.Cluster). The queue opens before the daemon joins the cluster:
// until attach gives it the live set and the election, no node is known
// and this node does not lead.
type jobMembers struct {
	self    string
	st      store.Store
	changed chan struct{}

	mu      sync.Mutex
	live    *cluster.Live
	elector *cluster.Elector
	fetch   *agent.Fetcher
}

func newJobMembers(self string, st store.Store) *jobMembers {
	return &jobMembers{self: self, st: st, changed: make(chan struct{}, 1)}
}

// attach gives the membership its live set and election, and tells the
// queue of every change of the live set until ctx ends.
func (j *jobMembers) attach(ctx context.Context, live *cluster.Live, el *cluster.Elector, fetch *agent.Fetcher, wg *sync.WaitGroup) {
	j.mu.Lock()
	j.live, j.elector, j.fetch = live, el, fetch
	j.mu.Unlock()
	ch := live.Changed()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ch:
				j.notify()
			case <-ctx.Done():
				return
			}
		}
	}()
	j.notify()
}

func (j *jobMembers) notify() {
	select {
	case j.changed <- struct{}{}:
	default:
	}
}

// Self is this node's name.
func (j *jobMembers) Self() string { return j.self }

// Changed gets a value after each change of the live set.
func (j *jobMembers) Changed() <-chan struct{} { return j.changed }

// Nodes returns the live nodes with the job slots their records give.
func (j *jobMembers) Nodes() ([]jobs.Node, bool) {
	j.mu.Lock()
	live := j.live
	j.mu.Unlock()
	if live == nil {
		return nil, false
	}
	select {
	case <-live.Ready():
	default:
		return nil, false
	}
	names := live.Nodes()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kvs, err := j.st.List(ctx, store.NodesPrefix)
	if err != nil {
		return nil, false
	}
	recs := map[string]cluster.Record{}
	for _, kv := range kvs {
		var r cluster.Record
		if json.Unmarshal(kv.Value, &r) == nil {
			recs[r.Name] = r
		}
	}
	out := make([]jobs.Node, 0, len(names))
	for _, n := range names {
		// A live node has a record (written before its heartbeat); one
		// removed meanwhile takes no job.
		r, ok := recs[n]
		out = append(out, jobs.Node{Name: n, Slots: r.JobSlots, Draining: r.Draining || !ok})
	}
	return out, true
}

// Leading returns this node's leadership, or nil.
func (j *jobMembers) Leading() cluster.Term {
	j.mu.Lock()
	el := j.elector
	j.mu.Unlock()
	if el == nil {
		return nil
	}
	return el.Leading()
}

// fetchingRunner runs a cluster's job by the digest stored with it (see
// jobs.Options.ImageDigest): an image this node lacks is fetched from
// another node first, checked against its digest.
type fetchingRunner struct {
	jobs.Runner
	members *jobMembers
}

// Run fetches the job's image if needed, then runs it.
func (r fetchingRunner) Run(ctx context.Context, j *jobs.Job, p *jobs.Plan, ready func()) error {
	if strings.HasPrefix(p.Req.Image, "sha256:") {
		r.members.mu.Lock()
		f := r.members.fetch
		r.members.mu.Unlock()
		if f != nil {
			if err := f.Ensure(ctx, p.Req.Image, ""); err != nil {
				return fmt.Errorf("image %q: %w", j.Image, err)
			}
		}
	}
	return r.Runner.Run(ctx, j, p, ready)
}

// jobEvent records a job taken back from a lost node in the event log.
func (d *Daemon) jobEvent(ev *events.Log) func(kind, reason string) {
	return func(kind, reason string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := ev.Emit(ctx, events.Event{Kind: kind, Reason: reason}); err != nil {
			d.log.Warn("job event not recorded", "kind", kind, "err", err)
		}
	}
}

// leaseGuard returns the heartbeat's observer that calls lost once the
// node's lease may be gone: no good renewal for half its TTL, or the
// heartbeat counts itself lost. Half the TTL is before etcd can have let
// the lease expire, so the node's jobs stop before the leader may give
// them to another node: a job never runs on two nodes at once.
func leaseGuard(ttl time.Duration, now func() time.Time, lost func()) func(cluster.Status) {
	var lastOK time.Time
	return func(s cluster.Status) {
		t := now()
		switch {
		case s.Alive:
			lastOK = t
		case s.Lost || (!lastOK.IsZero() && t.Sub(lastOK) >= ttl/2):
			lost()
		}
	}
}

// stopTakingJobs sets this node's job slots to 0 in its record before its
// queue stops: the jobs it queues again then go to other nodes, not back
// to it while it is still a member. The next start writes them again.
func (d *Daemon) stopTakingJobs() {
	if d.cluster == nil || d.jobMembers == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := store.NodeKey(d.cfg.Node)
	for {
		kv, err := d.store.Get(ctx, key)
		var rec cluster.Record
		if err == nil {
			err = json.Unmarshal(kv.Value, &rec)
		}
		if err == nil && rec.JobSlots != 0 {
			rec.JobSlots = 0
			b, _ := json.Marshal(rec)
			if _, err = d.store.CompareAndSwap(ctx, key, kv.ModRev, b); errdefs.IsConflict(err) {
				continue // changed under us: read it again
			}
		}
		if err != nil {
			d.log.Warn("node record: job slots not set to 0 before stopping", "node", d.cfg.Node, "err", err)
		}
		return
	}
}
