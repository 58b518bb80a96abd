package jobs

import (
	"context"

	"github.com/shoal-run/shoal/internal/api/types"
)

// Run submits one job and waits for its end, as Submit and Wait do. On a
// single host, a job without a callback that starts at once is stored
// only when it ends: its caller learns of it only from its result, so a
// crash before then loses a job no one was told of (the caller's request
// fails), and its submission and start cost no writes. One that must
// queue is stored as Submit stores it.
func (m *Manager) Run(ctx context.Context, req types.JobRequest) (Job, error) {
	entries, err := m.admit(ctx, []types.JobRequest{req})
	if err != nil {
		return Job{}, err
	}
	e := entries[0]
	id, waited := e.job.ID, e.job.Callback == "" // e.job changes once queued
	if _, err := m.submitOne(ctx, e, waited); err != nil {
		return Job{}, err
	}
	return m.waitEntry(ctx, id, e)
}

// submitOne queues job e (one submission, on a single host) and stores it
// at the same time, so that it may start while its submission is being
// written: the store's fsyncs are then off the path of a job submitted to
// a free slot. It returns once the submission is stored, as Submit does:
// a job the caller is told about survives a crash. A job that started at
// once is stored as started: its submission and its start are one write,
// so its attempt counts after a crash as any stored start does; if waited
// is set (see Run), such a job is not stored until its end. Otherwise its
// start and its end are stored only after its submission (see
// startToStore); if that fails, the job is taken back (killed if it
// started), nothing of it is stored and the caller gets the error.
func (m *Manager) submitOne(ctx context.Context, e *entry, waited bool) ([]Job, error) {
	e.stored = make(chan struct{})
	m.mu.Lock()
	m.live[e.job.ID] = e
	m.sched.Push(Entry{ID: e.job.ID, Tenant: e.job.Tenant, Priority: e.job.Priority, Seq: e.seq})
	j := e.job // as submitted: dispatch changes e.job
	m.dispatch()
	rec := e.job // started, if dispatch started it
	e.noStart = e.running
	m.mu.Unlock()
	var err error
	if !waited || !e.running {
		err = m.put(ctx, &rec, &e.plan.Req, e.seq)
	}
	m.mu.Lock()
	if err != nil {
		e.unstored = true
		if e.running {
			e.cancel()
		} else {
			m.sched.Remove(e.job.Tenant, e.job.ID)
			delete(m.live, e.job.ID)
			close(e.done)
		}
	}
	close(e.stored)
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return []Job{j}, nil
}

// startToStore waits until job e's submission is stored and says whether
// its start is still to be stored: not if the submission failed, nor if
// it was the start or not stored at all (see submitOne).
func (m *Manager) startToStore(e *entry) bool {
	if e.stored == nil {
		return true
	}
	<-e.stored
	m.mu.Lock()
	defer m.mu.Unlock()
	return !e.unstored && !e.noStart
}
