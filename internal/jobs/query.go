package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Get returns a job.
func (m *Manager) Get(ctx context.Context, id string) (Job, error) {
	m.mu.Lock()
	if e := m.live[id]; e != nil {
		j := e.job
		m.mu.Unlock()
		return j, nil
	}
	m.mu.Unlock()
	r, err := m.load(ctx, id)
	if err != nil {
		return Job{}, err
	}
	return r.Job, nil
}

// Wait blocks until job id has finished or ctx ends.
func (m *Manager) Wait(ctx context.Context, id string) (Job, error) {
	m.mu.Lock()
	e := m.live[id]
	m.mu.Unlock()
	if e != nil {
		return m.waitEntry(ctx, id, e)
	}
	return m.Get(ctx, id)
}

// waitEntry blocks until job id, entry e, has finished or ctx ends.
func (m *Manager) waitEntry(ctx context.Context, id string, e *entry) (Job, error) {
	select {
	case <-e.done:
		m.mu.Lock()
		j := e.job
		m.mu.Unlock()
		if j.State != Queued {
			return j, nil
		}
		return j, fmt.Errorf("job %s: the daemon is stopping: %w", id, errdefs.ErrUnavailable)
	case <-ctx.Done():
		return Job{}, fmt.Errorf("job %s: wait: %w", id, ctx.Err())
	}
}

// Cancel cancels a queued or running job and returns it once it has ended.
func (m *Manager) Cancel(ctx context.Context, id string) (Job, error) {
	m.mu.Lock()
	e := m.live[id]
	if e == nil {
		m.mu.Unlock()
		j, err := m.Get(ctx, id)
		if err != nil {
			return j, err
		}
		return j, fmt.Errorf("job %s has already ended (%s): %w", id, j.State, errdefs.ErrConflict)
	}
	e.cancelled = true
	if !e.running {
		m.sched.Remove(e.job.Tenant, id)
		delete(m.live, id)
		now := m.clock.Now()
		e.job.State, e.job.Finished = Cancelled, &now
		if e.job.Callback != "" {
			e.job.CallbackState = "pending"
		}
		j := e.job
		close(e.done)
		m.mu.Unlock()
		if err := m.put(ctx, &j, nil, e.seq); err != nil {
			return j, err
		}
		if j.Callback != "" {
			m.deliverLater(j)
		}
		return j, nil
	}
	e.cancel()
	m.mu.Unlock()
	return m.Wait(ctx, id)
}

// List returns jobs, newest first.
func (m *Manager) List(ctx context.Context, f types.JobFilter) ([]Job, error) {
	return m.list(ctx, f, true)
}

// list returns the stored jobs, newest first, as this node's entries have
// them; with unstored, also the entries not stored yet.
func (m *Manager) list(ctx context.Context, f types.JobFilter, unstored bool) ([]Job, error) {
	kvs, err := m.o.Store.List(ctx, store.JobsPrefix)
	if err != nil {
		return nil, fmt.Errorf("jobs: list: %w", err)
	}
	out := []Job{}
	match := func(j Job) bool {
		return (f.Tenant == "" || j.Tenant == f.Tenant) && (f.State == "" || j.State == f.State)
	}
	m.mu.Lock()
	listed := make(map[string]bool, len(m.live))
	for _, kv := range kvs {
		var r record
		if json.Unmarshal(kv.Value, &r) != nil {
			continue
		}
		j := r.Job
		if e := m.live[j.ID]; e != nil {
			j = e.job
			listed[j.ID] = true
		}
		if match(j) {
			out = append(out, j)
		}
	}
	// Live jobs not stored yet: being submitted, or not stored until they
	// end (see Run).
	for id, e := range m.live {
		if unstored && !listed[id] && match(e.job) {
			out = append(out, e.job)
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].Submitted.After(out[b].Submitted) })
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// Stats counts queued and running jobs and the slots.
func (m *Manager) Stats() (queued, running, slots int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sched.Queued(""), m.sched.Running(""), m.o.Slots
}

// TenantStats is one tenant's jobs waiting and running.
type TenantStats struct {
	Tenant  string
	Queued  int
	Running int
}

// Tenants counts the queued and running jobs of every tenant that has
// any, by name.
func (m *Manager) Tenants() []TenantStats {
	m.mu.Lock()
	out := make([]TenantStats, 0, len(m.sched.tenants))
	for _, t := range m.sched.tenants {
		if len(t.jobs) > 0 || t.running > 0 {
			out = append(out, TenantStats{Tenant: t.name, Queued: len(t.jobs), Running: t.running})
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}
