package jobs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// openCluster starts a cluster node's queue: nothing is queued here (the
// leader assigns from the store); callbacks of jobs this node ended and
// had not delivered are retried, and follow starts.
func (q *ClusterQueue) openCluster(ctx context.Context) error {
	m := q.m
	q.recs, q.waiters, q.kick = map[string]seenJob{}, map[string][]chan struct{}{}, make(chan struct{}, 1)
	self := m.o.Node
	q.orphaned = fmt.Sprintf("node %s restarted", self)
	kvs, err := m.o.Store.List(ctx, store.JobsPrefix)
	if err != nil {
		return fmt.Errorf("jobs: list: %w", err)
	}
	for _, kv := range kvs {
		if s, ok := decodeStored(kv); ok && ended(s.rec.Job.State) && s.rec.Job.Node == self && s.rec.Job.CallbackState == "pending" {
			m.deliverLater(s.rec.Job)
		}
	}
	m.mu.Lock()
	m.wg.Add(1)
	go q.follow()
	m.janitor = m.clock.AfterFunc(m.sweepEvery(), m.sweep)
	m.mu.Unlock()
	return nil
}

// putNew stores a job just submitted; in a cluster with the digest of its
// image.
func (m *Manager) putNew(ctx context.Context, e *entry, req *types.JobRequest) error {
	if m.node == nil || m.o.ImageDigest == nil {
		return m.put(ctx, &e.job, req, e.seq)
	}
	dg, err := m.o.ImageDigest(ctx, req.Image)
	if err != nil {
		return fmt.Errorf("job %s: image %q: %w", e.job.ID, req.Image, err)
	}
	b, err := json.Marshal(record{Job: e.job, Req: req, Seq: e.seq, Digest: dg})
	if err != nil {
		return fmt.Errorf("job %s: %w", e.job.ID, err)
	}
	if _, err := m.o.Store.Put(ctx, store.JobKey(e.job.ID), b); err != nil {
		return fmt.Errorf("job %s: store: %w", e.job.ID, err)
	}
	return nil
}

// canQueue reports whether tenant may queue n more jobs: in a cluster it
// counts the tenant's queued jobs of the whole cluster. m.mu is held.
func (m *Manager) canQueue(tenant string, n int) bool {
	if m.node == nil {
		return m.sched.CanQueue(tenant, n)
	}
	q := m.sched.quota(tenant)
	if q.MaxQueued <= 0 {
		return true
	}
	queued := 0
	for _, s := range m.node.recs {
		if s.rec.Job.Tenant == tenant && s.rec.Job.State == Queued {
			queued++
		}
	}
	return queued+n <= q.MaxQueued
}

// publishNode ends a job this node ran: its end is seenJob if the job is
// still this node's, then its waiters here are answered and its callback
// sent.
func (q *ClusterQueue) publishNode(e *entry, j Job, err error) {
	m := q.m
	m.mu.Lock()
	e.ending = true
	m.mu.Unlock()
	out, ok := q.publishCluster(e, j, err)
	m.mu.Lock()
	if ok {
		q.seen(record{Job: out}, 0, 0)
	}
	e.job = out
	delete(m.live, j.ID)
	close(e.done)
	m.mu.Unlock()
	if ok && out.CallbackState == "pending" {
		m.deliverLater(out)
	}
	m.log.Debug("job finished", "job", j.ID, "tenant", j.Tenant, "state", out.State, "stored", ok)
}

// waitCluster waits until job id has ended, whichever node runs it.
func (q *ClusterQueue) waitCluster(ctx context.Context, id string) (Job, error) {
	m := q.m
	for {
		changed, forget := q.waitChange(id)
		r, _, err := q.loadRev(ctx, id)
		if err != nil {
			forget()
			return Job{}, err
		}
		if ended(r.Job.State) {
			forget()
			return r.Job, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			forget()
			return Job{}, fmt.Errorf("job %s: wait: %w", id, ctx.Err())
		case <-m.ctx.Done():
			forget()
			return r.Job, fmt.Errorf("job %s: the daemon is stopping: %w", id, errdefs.ErrUnavailable)
		}
	}
}

// cancelCluster cancels a job of the cluster's queue: a job no node has
// yet ends at once; else the node it is assigned to is asked, through its
// record, and the answer waits for the job's end.
func (q *ClusterQueue) cancelCluster(ctx context.Context, id string) (Job, error) {
	m := q.m
	for {
		r, kv, err := q.loadRev(ctx, id)
		if err != nil {
			return Job{}, err
		}
		j := r.Job
		if ended(j.State) {
			return j, fmt.Errorf("job %s has already ended (%s): %w", id, j.State, errdefs.ErrConflict)
		}
		if r.Cancel {
			return q.waitCluster(ctx, id)
		}
		mine := j.Node == ""
		if mine {
			now := m.clock.Now()
			r.Job.State, r.Job.Finished, r.Req = Cancelled, &now, nil
			if j.Callback != "" {
				r.Job.CallbackState = "pending"
			}
		} else {
			r.Cancel = true
		}
		b, _ := json.Marshal(r)
		if _, err := m.o.Store.CompareAndSwap(ctx, kv.Key, kv.ModRev, b); err != nil {
			if errdefs.IsConflict(err) {
				continue // changed meanwhile (assigned, started): again
			}
			return j, fmt.Errorf("job %s: %w", id, err)
		}
		q.kickPass()
		if !mine {
			return q.waitCluster(ctx, id)
		}
		if r.Job.Callback != "" {
			m.deliverLater(r.Job)
		}
		return r.Job, nil
	}
}

// loadRev reads job id's record with its key's revisions.
func (q *ClusterQueue) loadRev(ctx context.Context, id string) (record, store.KV, error) {
	m := q.m
	if validName(id) != nil {
		return record{}, store.KV{}, fmt.Errorf("job %q: %w", id, errdefs.ErrNotFound)
	}
	kv, err := m.o.Store.Get(ctx, store.JobKey(id))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return record{}, kv, fmt.Errorf("job %q: %w", id, errdefs.ErrNotFound)
		}
		return record{}, kv, fmt.Errorf("job %q: %w", id, err)
	}
	var r record
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return record{}, kv, fmt.Errorf("job %q: %w", id, err)
	}
	return r, kv, nil
}

// clusterStats counts the cluster's queued jobs and this node's running
// ones, and per tenant the cluster's queued and running jobs. m.mu is held.
func (q *ClusterQueue) clusterStats() (queued, running int, tenants map[string]*TenantStats) {
	m := q.m
	tenants = map[string]*TenantStats{}
	for _, s := range q.recs {
		j := s.rec.Job
		t := tenants[j.Tenant]
		if t == nil {
			t = &TenantStats{Tenant: j.Tenant}
			tenants[j.Tenant] = t
		}
		if j.State == Queued {
			t.Queued++
			queued++
		} else {
			t.Running++
		}
	}
	for _, e := range m.live {
		if e.running {
			running++
		}
	}
	return queued, running, tenants
}
