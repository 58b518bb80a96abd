package jobs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster"
)

// Queue is the job queue as the API and the daemon use it: one host's
// (*Manager, Open) or a node's part of the cluster's (*ClusterQueue,
// OpenCluster), chosen once when the daemon opens it.
type Queue interface {
	// Submit validates every request, then stores and queues them all;
	// on any error none is queued.
	Submit(ctx context.Context, reqs []types.JobRequest) ([]Job, error)
	// Run submits one job and waits for its end.
	Run(ctx context.Context, req types.JobRequest) (Job, error)
	Get(ctx context.Context, id string) (Job, error)
	// Wait blocks until job id has finished or ctx ends.
	Wait(ctx context.Context, id string) (Job, error)
	// Cancel cancels a queued or running job and returns it once it has
	// ended.
	Cancel(ctx context.Context, id string) (Job, error)
	// List returns jobs, newest first.
	List(ctx context.Context, f types.JobFilter) ([]Job, error)
	// Stats counts the queued and running jobs and this node's slots.
	Stats() (queued, running, slots int)
	// Tenants counts the queued and running jobs of every tenant that has
	// any, by name.
	Tenants() []TenantStats
	// Close stops starting jobs, puts the running ones back in the queue
	// and waits for that to be written.
	Close()
}

var (
	_ Queue              = (*Manager)(nil)
	_ Queue              = (*ClusterQueue)(nil)
	_ cluster.LeaderWork = (*ClusterQueue)(nil)
)

// ClusterQueue is this node's part of a cluster's one job queue, on an
// etcd store (Options.Cluster): any node takes submissions and answers
// from the store, every node runs the jobs assigned to it, and the leader
// assigns them (a cluster.LeaderWork the daemon's Hub establishes under
// each term of this node). It shares the one host's core (admission,
// running, callbacks, retention); its public methods are its own.
type ClusterQueue struct {
	m *Manager // the core that runs this node's jobs; its mu guards what follows

	// The jobs not ended as the store has them, who waits for a change of
	// one, this node's term while it leads (Establish), the leader's
	// state (guarded by passMu, held by a pass's leader part) and the
	// reason a job recorded as running here but not running is taken back.
	recs     map[string]seenJob
	waiters  map[string][]chan struct{}
	kick     chan struct{}
	term     *cluster.Lead
	passMu   sync.Mutex
	lead     *lead
	orphaned string
}

// OpenCluster opens this node's part of the cluster's queue: nothing is
// queued here (the leader assigns from the store); callbacks of jobs this
// node ended and had not delivered are retried, and the node follows the
// store's job records.
func OpenCluster(ctx context.Context, o Options) (*ClusterQueue, error) {
	if o.Store == nil || o.Runner == nil || o.Cluster == nil {
		return nil, errors.New("jobs: a store, a runner and the cluster are needed")
	}
	if o.Node == "" {
		return nil, errors.New("jobs: a cluster's queue needs this node's name")
	}
	m := newManager(ctx, o.withDefaults())
	q := &ClusterQueue{m: m}
	m.node = q
	if err := q.openCluster(ctx); err != nil {
		m.stop()
		return nil, err
	}
	return q, nil
}

// Submit validates every request, then stores them all (none on any
// error); the leader takes them from the store.
func (q *ClusterQueue) Submit(ctx context.Context, reqs []types.JobRequest) ([]Job, error) {
	m := q.m
	entries, err := m.admit(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if err := m.storeNew(ctx, entries); err != nil {
		return nil, err
	}
	out := make([]Job, len(entries))
	for i, e := range entries {
		out[i] = e.job
	}
	q.kickPass()
	return out, nil
}

// Run submits one job and waits for its end, whichever node runs it.
func (q *ClusterQueue) Run(ctx context.Context, req types.JobRequest) (Job, error) {
	js, err := q.Submit(ctx, []types.JobRequest{req})
	if err != nil {
		return Job{}, err
	}
	return q.Wait(ctx, js[0].ID)
}

// Get returns a job, as this node runs it or as the store has it.
func (q *ClusterQueue) Get(ctx context.Context, id string) (Job, error) { return q.m.Get(ctx, id) }

// Wait waits until job id has ended, whichever node runs it.
func (q *ClusterQueue) Wait(ctx context.Context, id string) (Job, error) {
	return q.waitCluster(ctx, id)
}

// Cancel cancels a job of the cluster's queue: a job no node has yet ends
// at once; else the node it is assigned to is asked, through its record,
// and the answer waits for the job's end.
func (q *ClusterQueue) Cancel(ctx context.Context, id string) (Job, error) {
	return q.cancelCluster(ctx, id)
}

// List returns the cluster's jobs, newest first.
func (q *ClusterQueue) List(ctx context.Context, f types.JobFilter) ([]Job, error) {
	return q.m.list(ctx, f, false)
}

// Stats counts the cluster's queued jobs, this node's running ones and
// its slots.
func (q *ClusterQueue) Stats() (queued, running, slots int) {
	m := q.m
	m.mu.Lock()
	defer m.mu.Unlock()
	qd, r, _ := q.clusterStats()
	return qd, r, m.o.Slots
}

// Tenants counts the queued and running jobs of every tenant that has any
// on every node, by name.
func (q *ClusterQueue) Tenants() []TenantStats {
	m := q.m
	m.mu.Lock()
	_, _, ts := q.clusterStats()
	m.mu.Unlock()
	out := make([]TenantStats, 0, len(ts))
	for _, t := range ts {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}

// Close stops starting jobs, kills the ones this node runs and queues them
// again for the other nodes, and waits for that to be written.
func (q *ClusterQueue) Close() { q.m.Close() }

// Establish makes this node's queue assign the cluster's jobs under term l
// (cluster.LeaderWork).
func (q *ClusterQueue) Establish(l *cluster.Lead) {
	m := q.m
	m.mu.Lock()
	q.term = l
	m.mu.Unlock()
	q.kickPass()
}

// Revoke stops the assignment (cluster.LeaderWork): it returns once a pass
// under way has ended.
func (q *ClusterQueue) Revoke() {
	m := q.m
	m.mu.Lock()
	q.term = nil
	m.mu.Unlock()
	q.passMu.Lock()
	q.lead = nil
	q.passMu.Unlock()
}

// LostLease tells the queue that this node's lease has expired or may
// expire (it could not renew it): the leader may give its jobs to other
// nodes, so it kills the jobs it runs without storing their end; once the
// store answers, the ones still recorded as running here are queued again
// (or lost) by the next pass.
func (q *ClusterQueue) LostLease() {
	m := q.m
	m.mu.Lock()
	defer m.mu.Unlock()
	q.orphaned = fmt.Sprintf("node %s could not renew its lease", m.o.Node)
	for id, e := range m.live {
		if !e.revoked {
			m.log.Warn("node lease not renewed; killing its job", "job", id)
			e.revoked = true
			e.cancel()
		}
	}
}
