package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/store"
)

// fetchingRunner runs a cluster's job by the digest stored with it (see
// jobs.Options.ImageDigest): an image this node lacks is fetched from
// another node first, checked against its digest. The fetcher is set once
// the node has joined.
type fetchingRunner struct {
	jobs.Runner
	fetch *atomic.Pointer[agent.Fetcher]
}

// Run fetches the job's image if needed, then runs it.
func (r fetchingRunner) Run(ctx context.Context, j *jobs.Job, p *jobs.Plan, ready func()) error {
	if strings.HasPrefix(p.Req.Image, "sha256:") {
		if f := r.fetch.Load(); f != nil {
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
	if d.cluster == nil || d.jobFetch == nil {
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
