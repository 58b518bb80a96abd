package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Cluster is the membership a Manager needs to share one queue with the
// other nodes of a cluster: the live nodes with their records (job slots,
// draining), and a signal when they change. The leader's part of the queue
// is a cluster.LeaderWork: the cluster's Hub establishes the Manager under
// each term of this node (it then assigns jobs, its writes through the
// term) and revokes it when the term ends.
type Cluster interface {
	// Nodes returns the live nodes (ready or draining) with their records.
	Nodes(ctx context.Context) ([]cluster.Node, error)
	// Changed returns a channel that gets a value after each change of
	// the live set or of a node record.
	Changed() <-chan struct{}
}

// Node is a live node of a cluster as the queue sees it.
type Node struct {
	Name     string
	Slots    int  // jobs it runs at once
	Draining bool // it takes no new job
}

// nodesOf returns the live nodes as the queue sees them.
func nodesOf(nodes []cluster.Node) []Node {
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, Node{Name: n.Name, Slots: n.JobSlots, Draining: n.State == cluster.StateDraining})
	}
	return out
}

// seenJob is a job record as last seen in the store, with its revisions.
type seenJob struct {
	rec       record
	rev       int64 // ModRev: the revision a compare-and-swap names
	createRev int64 // orders jobs of equal priority, whichever node took them
}

// ended reports whether a job in state is over.
func ended(state string) bool { return state != Queued && state != Running }

// follow keeps q.recs, the jobs not ended, in step with the store, and
// makes a pass (pass) after each batch of changes, each change of the live
// set and every second, until the Manager closes.
func (q *ClusterQueue) follow() {
	m := q.m
	defer m.wg.Done()
	changed := m.o.Cluster.Changed()
	for m.ctx.Err() == nil {
		// Watch first, then list: no change falls between the two.
		ch, err := m.o.Store.Watch(m.ctx, store.JobsPrefix)
		var kvs []store.KV
		if err == nil {
			kvs, err = m.o.Store.List(m.ctx, store.JobsPrefix)
		}
		if err != nil {
			m.log.Debug("job records: watch failed", "err", err)
			if !m.sleep(time.Second) {
				return
			}
			continue
		}
		q.resync(kvs)
		tick := m.clock.NewTimer(time.Second)
		dirty := true
	loop:
		for {
			if dirty {
				// Take every change already waiting before the pass.
				select {
				case ev, ok := <-ch:
					if !ok {
						break loop
					}
					q.apply(ev)
					continue
				default:
				}
				q.pass()
				dirty = false
			}
			select {
			case ev, ok := <-ch:
				if !ok {
					break loop
				}
				q.apply(ev)
			case <-q.kick:
			case <-changed:
			case <-tick.C():
				tick.Reset(time.Second)
			case <-m.ctx.Done():
				tick.Stop()
				return
			}
			dirty = true
		}
		tick.Stop()
	}
}

// sleep waits d on the Manager's clock; false once it closes.
func (m *Manager) sleep(d time.Duration) bool {
	t := m.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-m.ctx.Done():
		return false
	}
}

// kickPass asks follow for a pass soon.
func (q *ClusterQueue) kickPass() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// resync replaces q.recs with the listed records.
func (q *ClusterQueue) resync(kvs []store.KV) {
	m := q.m
	recs := map[string]seenJob{}
	for _, kv := range kvs {
		if s, ok := decodeStored(kv); ok && !ended(s.rec.Job.State) {
			recs[s.rec.Job.ID] = s
		}
	}
	m.mu.Lock()
	q.recs = recs
	for id := range q.waiters {
		q.wake(id)
	}
	m.mu.Unlock()
}

// apply takes one change of a job record into q.recs, unless it is older
// than what q.recs holds (a write of this node's own, seen again).
func (q *ClusterQueue) apply(ev store.Event) {
	m := q.m
	id := strings.TrimPrefix(ev.KV.Key, store.JobsPrefix)
	m.mu.Lock()
	defer m.mu.Unlock()
	defer q.wake(id)
	if cur, ok := q.recs[id]; ok && ev.KV.ModRev <= cur.rev {
		return
	}
	if ev.Type == store.EventDelete {
		delete(q.recs, id)
		return
	}
	s, ok := decodeStored(ev.KV)
	if !ok || ended(s.rec.Job.State) {
		delete(q.recs, id)
		return
	}
	q.recs[id] = s
}

// seen takes a record this node has just written into q.recs. m.mu is held.
func (q *ClusterQueue) seen(r record, rev int64, createRev int64) {
	if ended(r.Job.State) {
		delete(q.recs, r.Job.ID)
	} else if cur, ok := q.recs[r.Job.ID]; !ok || cur.rev < rev {
		q.recs[r.Job.ID] = seenJob{rec: r, rev: rev, createRev: createRev}
	}
}

func decodeStored(kv store.KV) (seenJob, bool) {
	var r record
	if err := json.Unmarshal(kv.Value, &r); err != nil || r.Job.ID == "" {
		return seenJob{}, false
	}
	return seenJob{rec: r, rev: kv.ModRev, createRev: kv.CreateRev}, true
}

// waitChange returns a channel closed at the next change of job id's
// record this node sees, and a function to call when it is not needed.
func (q *ClusterQueue) waitChange(id string) (<-chan struct{}, func()) {
	m := q.m
	ch := make(chan struct{})
	m.mu.Lock()
	q.waiters[id] = append(q.waiters[id], ch)
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		ws := q.waiters[id]
		for i, w := range ws {
			if w == ch {
				q.waiters[id] = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(q.waiters[id]) == 0 {
			delete(q.waiters, id)
		}
	}
}

// wake closes the waiters of job id. m.mu is held.
func (q *ClusterQueue) wake(id string) {
	for _, ch := range q.waiters[id] {
		close(ch)
	}
	delete(q.waiters, id)
}

// snapshot returns the jobs not ended, as last seen. m.mu is not held.
func (q *ClusterQueue) snapshot() []seenJob {
	m := q.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]seenJob, 0, len(q.recs))
	for _, s := range q.recs {
		out = append(out, s)
	}
	return out
}

// casRecord writes r over the record seen at rev, through the leader's
// term when one is given (its writes bounded by cluster.WriteBound), and
// takes it into q.recs.
func (q *ClusterQueue) casRecord(ctx context.Context, fence cluster.Term, r record, rev, createRev int64) error {
	m := q.m
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := store.JobKey(r.Job.ID)
	var nrev int64
	if fence != nil {
		nrev, err = fence.CompareAndSwap(ctx, key, rev, b)
	} else {
		nrev, err = m.o.Store.CompareAndSwap(ctx, key, rev, b)
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	q.seen(r, nrev, createRev)
	m.mu.Unlock()
	return nil
}

// isConflict reports an error of a compare-and-swap that lost a race (the
// record changed), as opposed to a deposed leader or a store that failed.
func isConflict(err error) bool {
	return errdefs.IsConflict(err) && !errors.Is(err, cluster.ErrDeposed)
}
