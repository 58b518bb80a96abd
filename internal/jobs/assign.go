package jobs

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/shoal-run/shoal/internal/cluster"
)

// lead is what the leader keeps for its term: the scheduler over the
// whole cluster's queue, with the ids it holds.
type lead struct {
	fence  cluster.Term
	sched  *Scheduler
	queued map[string]string // id → tenant, the jobs in sched's queues
}

// pass is follow's step: this node runs what is assigned to it, and the
// leader assigns jobs to nodes.
func (q *ClusterQueue) pass() {
	m := q.m
	q.nodePass()
	q.passMu.Lock()
	defer q.passMu.Unlock()
	m.mu.Lock()
	f := q.term
	m.mu.Unlock()
	if f == nil {
		q.lead = nil
		return
	}
	if err := q.leaderPass(f); err != nil {
		if errors.Is(err, cluster.ErrDeposed) {
			m.log.Info("job queue: leadership over", "err", err)
		} else {
			m.log.Warn("job queue: assignment", "err", err)
		}
		q.lead = nil
	}
}

// leaderPass queues again the jobs of lost nodes, then gives queued jobs
// to nodes with free slots: the next job is the scheduler's pick over the
// whole cluster (weighted fair share between tenants, by priority and
// submission within one), and goes to the node with the most free slots.
// Every write is fenced by the leadership and bounded by
// cluster.WriteBound: a leader cut off from the store gives the write up,
// and with it the pass (logged), rather than hold up the queue; the next
// pass tries again.
func (q *ClusterQueue) leaderPass(f cluster.Term) error {
	m := q.m
	ns, err := m.o.Cluster.Nodes(m.ctx)
	if err != nil {
		return fmt.Errorf("live nodes: %w", err)
	}
	nodes := nodesOf(ns)
	live := map[string]bool{}
	for _, n := range nodes {
		live[n.Name] = true
	}
	ctx := m.ctx
	recs := q.snapshot()
	sort.Slice(recs, func(i, j int) bool { return recs[i].createRev < recs[j].createRev })
	kept := recs[:0]
	for _, s := range recs {
		if n := s.rec.Job.Node; n != "" && !live[n] {
			if err := q.requeue(ctx, f, s, fmt.Sprintf("node %s lost", n)); err != nil && !isConflict(err) {
				return err
			}
			continue
		}
		kept = append(kept, s)
	}
	recs = kept

	if q.lead == nil || q.lead.fence != f {
		sc := NewScheduler()
		sc.Weights, sc.Quotas, sc.Default = m.o.Weights, m.o.Quotas, m.o.DefaultQuota
		q.lead = &lead{fence: f, sched: sc, queued: map[string]string{}}
		m.log.Info("job queue: assigning jobs to the cluster's nodes", "node", m.o.Node)
	}
	l := q.lead
	byID := map[string]seenJob{}
	running := map[string]int{}
	used := map[string]int{}
	for _, s := range recs {
		j := s.rec.Job
		switch {
		case j.Node != "":
			running[j.Tenant]++
			used[j.Node]++
		case j.State == Queued && !s.rec.Cancel:
			byID[j.ID] = s
		}
	}
	l.sched.SetRunning(running)
	for id, tenant := range l.queued {
		if _, ok := byID[id]; !ok {
			l.sched.Remove(tenant, id)
			delete(l.queued, id)
		}
	}
	for id, s := range byID {
		if _, ok := l.queued[id]; !ok {
			j := s.rec.Job
			l.sched.Push(Entry{ID: id, Tenant: j.Tenant, Priority: j.Priority, Seq: uint64(s.createRev)})
			l.queued[id] = j.Tenant
		}
	}
	free := map[string]int{}
	total := 0
	for _, n := range nodes {
		if k := n.Slots - used[n.Name]; !n.Draining && k > 0 {
			free[n.Name] = k
			total += k
		}
	}
	for ; total > 0; total-- {
		en, ok := l.sched.Next()
		if !ok {
			break
		}
		delete(l.queued, en.ID)
		node := mostFree(free)
		s := byID[en.ID]
		r := s.rec
		r.Job.Node = node
		if err := q.casRecord(ctx, f, r, s.rev, s.createRev); err != nil {
			l.sched.Done(en.Tenant)
			if isConflict(err) {
				continue // changed meanwhile (cancelled): the next pass sees it
			}
			return fmt.Errorf("job %s: assign to node %s: %w", en.ID, node, err)
		}
		free[node]--
		m.log.Debug("job assigned", "job", en.ID, "tenant", en.Tenant, "node", node)
	}
	return nil
}

// mostFree returns the node with the most free slots (by name on a tie).
func mostFree(free map[string]int) string {
	best := ""
	for n, k := range free {
		if best == "" || k > free[best] || (k == free[best] && n < best) {
			best = n
		}
	}
	return best
}

// requeue takes back a job from the node it was given to, which no longer
// runs it (the node was lost, or restarted): a job cancelled meanwhile
// ends cancelled; one that ran MaxAttempts times is lost; any other is
// queued again with the reason. The write goes through fence when given
// (the leader), else it is a plain compare-and-swap (the node itself).
// The change is logged and recorded as an event.
func (q *ClusterQueue) requeue(ctx context.Context, fence cluster.Term, s seenJob, why string) error {
	m := q.m
	r := s.rec
	j := &r.Job
	now := m.clock.Now()
	ran := j.State == Running
	kind, reason := "", ""
	switch {
	case r.Cancel:
		j.State, j.Finished = Cancelled, &now
	case ran && j.Attempts >= m.o.MaxAttempts:
		j.State, j.Finished = Lost, &now
		j.Error = fmt.Sprintf("%s while the job ran (attempt %d of %d); not run again", why, j.Attempts, m.o.MaxAttempts)
		kind, reason = "job_lost", fmt.Sprintf("job %s (tenant %s): %s", j.ID, j.Tenant, j.Error)
	default:
		when := "before the job started"
		if ran {
			when = fmt.Sprintf("while the job ran (attempt %d of %d)", j.Attempts, m.o.MaxAttempts)
		}
		j.Requeued = why + " " + when
		j.State, j.Node, j.Started, j.Steps = Queued, "", nil, nil
		kind, reason = "job_requeued", fmt.Sprintf("job %s (tenant %s): %s; queued again", j.ID, j.Tenant, j.Requeued)
	}
	if ended(j.State) {
		r.Req, r.Cancel = nil, false
		if j.Callback != "" {
			j.CallbackState = "pending"
		}
	}
	if err := q.casRecord(ctx, fence, r, s.rev, s.createRev); err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	if kind != "" {
		m.log.Warn("job taken back from its node", "job", j.ID, "state", j.State, "reason", reason)
		if m.o.Event != nil {
			m.o.Event(kind, reason)
		}
	}
	if j.CallbackState == "pending" {
		m.deliverLater(*j)
	}
	return nil
}
