package jobs

import (
	"context"

	"github.com/shoal-run/shoal/internal/api/types"
)

// submitOne queues job e (one submission, on a single host) and stores it
// at the same time, so that it may start while its submission is being
// written: the store's fsyncs are then off the path of a job submitted to
// a free slot. It returns once the submission is stored, as Submit does:
// a job the caller is told about survives a crash. A job that started at
// once is stored as started: its submission and its start are one write,
// so its attempt counts after a crash as any stored start does. Otherwise
// its start and its end are stored only after its submission (see
// startToStore); if that fails, the job is taken back (killed if it
// started), nothing of it is stored and the caller gets the error.
func (m *Manager) submitOne(ctx context.Context, e *entry, req *types.JobRequest) ([]Job, error) {
	e.stored = make(chan struct{})
	m.mu.Lock()
	m.live[e.job.ID] = e
	m.sched.Push(Entry{ID: e.job.ID, Tenant: e.job.Tenant, Priority: e.job.Priority, Seq: e.seq})
	j := e.job // as submitted: dispatch changes e.job
	m.dispatch()
	rec := e.job // started, if dispatch started it
	e.startStored = e.running
	m.mu.Unlock()
	err := m.put(ctx, &rec, req, e.seq)
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
// it was the start (see submitOne).
func (m *Manager) startToStore(e *entry) bool {
	if e.stored == nil {
		return true
	}
	<-e.stored
	m.mu.Lock()
	defer m.mu.Unlock()
	return !e.unstored && !e.startStored
}
