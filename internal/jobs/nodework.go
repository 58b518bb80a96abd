package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// nodePass is a cluster node's part of a pass: it stops the jobs it runs
// that are no longer its own (given to another node while this one was
// cut off) or that were cancelled, starts the jobs assigned to it while it
// has free slots, and takes back the jobs the store says it runs but it
// does not (it restarted, or lost its lease and killed them).
func (q *ClusterQueue) nodePass() {
	m := q.m
	self := m.o.Node
	recs := q.snapshot()
	sort.Slice(recs, func(i, j int) bool { return recs[i].createRev < recs[j].createRev })
	var start, orphans []seenJob
	m.mu.Lock()
	byID := make(map[string]seenJob, len(recs))
	for _, s := range recs {
		byID[s.rec.Job.ID] = s
	}
	for id, e := range m.live {
		s, ok := byID[id]
		switch {
		case e.ending:
		case !ok || s.rec.Job.Node != self || s.rec.Job.Attempts != e.job.Attempts:
			if !e.revoked {
				m.log.Warn("job no longer assigned to this node; killing it", "job", id, "node", self)
				e.revoked = true
				e.cancel()
			}
		case s.rec.Cancel && !e.cancelled:
			e.cancelled = true
			e.cancel()
		}
	}
	reason := q.orphaned
	for _, s := range recs {
		j := s.rec.Job
		if j.Node != self || m.live[j.ID] != nil {
			continue
		}
		switch {
		case j.State == Running:
			orphans = append(orphans, s)
		case s.rec.Cancel:
			orphans = append(orphans, s) // never started: requeue ends it cancelled
		case m.free > 0 && !m.closing:
			m.free--
			start = append(start, s)
		}
	}
	m.mu.Unlock()
	for _, s := range orphans {
		if err := q.requeue(m.ctx, nil, s, reason); err != nil && !isConflict(err) {
			m.log.Warn("job not taken back", "job", s.rec.Job.ID, "err", err)
		}
	}
	for _, s := range start {
		q.startAssigned(s)
	}
}

// startAssigned marks a job assigned to this node running in the store
// (only if the record is still as seen: still this node's) and runs it.
// The slot was taken by the caller.
func (q *ClusterQueue) startAssigned(s seenJob) {
	m := q.m
	r := s.rec
	j := r.Job
	giveBack := func() {
		m.mu.Lock()
		m.free++
		m.mu.Unlock()
	}
	var p *Plan
	var err error
	if r.Req == nil {
		err = fmt.Errorf("its request is not stored")
	} else {
		p, err = NewPlan(*r.Req, "")
	}
	if err == nil && r.Digest != "" {
		// The image the submitting node resolved, whatever the ref
		// names here.
		p.Req.Image = r.Digest
	}
	now := m.clock.Now()
	if err != nil {
		giveBack()
		j.State, j.Finished, j.Error = Failed, &now, "stored request no longer valid: "+err.Error()
		if j.Callback != "" {
			j.CallbackState = "pending"
		}
		if err := q.casRecord(m.ctx, nil, record{Job: j, Seq: r.Seq}, s.rev, s.createRev); err == nil && j.Callback != "" {
			m.deliverLater(j)
		}
		return
	}
	j.State, j.Started = Running, &now
	j.Attempts++
	j.QueueMs = ms(now.Sub(j.Submitted))
	r.Job = j
	if err := q.casRecord(m.ctx, nil, r, s.rev, s.createRev); err != nil {
		giveBack()
		if !isConflict(err) {
			m.log.Warn("job start not stored; not started", "job", j.ID, "err", err)
		}
		return
	}
	m.mu.Lock()
	e := &entry{job: j, plan: p, seq: r.Seq, done: make(chan struct{}), running: true}
	ctx, cancel := context.WithCancel(m.ctx)
	e.cancel = cancel
	m.live[j.ID] = e
	m.wg.Add(1)
	m.mu.Unlock()
	go m.run(ctx, e, j)
}

// publishCluster stores the end of job j that this node ran, if the job
// is still this node's: read, changed and compared-and-swapped, so that a
// cancel asked meanwhile is kept and a job taken back is not overwritten.
// It returns the job as seenJob, and whether it was.
func (q *ClusterQueue) publishCluster(e *entry, j Job, err error) (Job, bool) {
	m := q.m
	m.mu.Lock()
	cancelled, closing, revoked := e.cancelled, m.closing && !e.cancelled, e.revoked
	m.mu.Unlock()
	if revoked {
		return j, false
	}
	ctx := context.WithoutCancel(m.ctx)
	for attempt := 0; attempt < 100; attempt++ {
		kv, gerr := m.o.Store.Get(ctx, store.JobKey(j.ID))
		if gerr != nil {
			m.log.Error("job result not stored", "job", j.ID, "err", gerr)
			return j, false
		}
		s, ok := decodeStored(kv)
		if !ok || s.rec.Job.Node != j.Node || s.rec.Job.State != Running || s.rec.Job.Attempts != j.Attempts {
			m.log.Warn("job result dropped: the job is no longer this node's", "job", j.ID, "node", j.Node)
			return j, false
		}
		out := j
		now := m.clock.Now()
		req := s.rec.Req
		switch {
		case closing:
			// The node is stopping: the job goes back to the queue for
			// another node, this attempt not counted.
			out.State, out.Node, out.Started, out.Steps, out.Error = Queued, "", nil, nil, ""
			out.Attempts--
			out.Requeued = fmt.Sprintf("node %s stopped while the job ran", j.Node)
		case cancelled || s.rec.Cancel:
			out.State, out.Finished = Cancelled, &now
		case err != nil:
			out.State, out.Finished, out.Error = Failed, &now, err.Error()
		default:
			out.State, out.Finished = Done, &now
			out.OK = stepsOK(out.Steps)
		}
		if ended(out.State) {
			req = nil
			if out.Callback != "" {
				out.CallbackState = "pending"
			}
		}
		nr := s.rec
		nr.Job, nr.Req = out, req
		b, _ := json.Marshal(nr)
		_, cerr := m.o.Store.CompareAndSwap(ctx, kv.Key, kv.ModRev, b)
		if cerr == nil {
			return out, true
		}
		if !errdefs.IsConflict(cerr) {
			m.log.Error("job result not stored", "job", j.ID, "err", cerr)
			if m.sleep(100 * time.Millisecond) {
				continue
			}
			return out, false
		}
	}
	return j, false
}
