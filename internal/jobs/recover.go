package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// recover loads the stored jobs at Open: queued and interrupted jobs are
// queued again in submission order, the rest kept for Get and List.
func (m *Manager) recover(ctx context.Context) (err error) {
	kvs, err := m.o.Store.List(ctx, store.JobsPrefix)
	if err != nil {
		return fmt.Errorf("jobs: list: %w", err)
	}
	var recs []record
	for _, kv := range kvs {
		var r record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			m.log.Error("unreadable job record; removing it", "key", kv.Key, "err", err)
			m.o.Store.Delete(ctx, kv.Key)
			continue
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Seq < recs[j].Seq })
	// Callbacks to deliver start once m.mu is free (deliverLater takes it).
	var deliver []Job
	defer func() {
		for _, j := range deliver {
			if err == nil {
				m.deliverLater(j)
			}
		}
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		m.seq = max(m.seq, r.Seq)
		j := r.Job
		switch j.State {
		case Queued, Running:
			if j.State == Running && j.Attempts >= m.o.MaxAttempts {
				deliver = m.finishLost(ctx, r, deliver)
				continue
			}
			if r.Req == nil {
				deliver = m.finishLost(ctx, r, deliver)
				continue
			}
			p, err := NewPlan(*r.Req, "")
			if err != nil {
				r.Job.Error = "stored request no longer valid: " + err.Error()
				deliver = m.finishLost(ctx, r, deliver)
				continue
			}
			if j.State == Running {
				m.log.Warn("job was running when the daemon stopped; queued again", "job", j.ID, "attempt", j.Attempts)
				j.State, j.Started, j.Steps = Queued, nil, nil
				if err := m.put(ctx, &j, r.Req, r.Seq); err != nil {
					return err
				}
			}
			e := &entry{job: j, plan: p, seq: r.Seq, done: make(chan struct{})}
			m.live[j.ID] = e
			m.sched.Push(Entry{ID: j.ID, Tenant: j.Tenant, Priority: j.Priority, Seq: r.Seq})
		default:
			if j.Callback != "" && j.CallbackState == "pending" {
				deliver = append(deliver, j)
			}
		}
	}
	return nil
}

// finishLost fails a job that cannot be run again, and adds it to deliver
// if it has a callback.
func (m *Manager) finishLost(ctx context.Context, r record, deliver []Job) []Job {
	j := r.Job
	now := m.clock.Now()
	j.State, j.Finished = Failed, &now
	if j.Error == "" {
		j.Error = fmt.Sprintf("the daemon stopped while the job ran (%d attempts); not run again", j.Attempts)
	}
	m.log.Warn("job lost by a daemon restart; failed", "job", j.ID, "attempts", j.Attempts)
	if j.Callback != "" {
		j.CallbackState = "pending"
	}
	m.put(ctx, &j, nil, r.Seq)
	if j.Callback != "" {
		deliver = append(deliver, j)
	}
	return deliver
}

func (m *Manager) put(ctx context.Context, j *Job, req *types.JobRequest, seq uint64) error {
	b, err := json.Marshal(record{Job: *j, Req: req, Seq: seq})
	if err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	if _, err := m.o.Store.Put(ctx, store.JobKey(j.ID), b); err != nil {
		return fmt.Errorf("job %s: store: %w", j.ID, err)
	}
	return nil
}

func (m *Manager) load(ctx context.Context, id string) (record, error) {
	if validName(id) != nil {
		return record{}, fmt.Errorf("job %q: %w", id, errdefs.ErrNotFound)
	}
	kv, err := m.o.Store.Get(ctx, store.JobKey(id))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return record{}, fmt.Errorf("job %q: %w", id, errdefs.ErrNotFound)
		}
		return record{}, fmt.Errorf("job %q: %w", id, err)
	}
	var r record
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return record{}, fmt.Errorf("job %q: %w", id, err)
	}
	return r, nil
}

func (m *Manager) sweepEvery() time.Duration { return min(m.o.Retention/10+time.Second, time.Hour) }

// sweep deletes finished jobs older than the retention period.
func (m *Manager) sweep() {
	ctx := m.ctx
	kvs, err := m.o.Store.List(ctx, store.JobsPrefix)
	if err == nil {
		now := m.clock.Now()
		for _, kv := range kvs {
			var r record
			if json.Unmarshal(kv.Value, &r) != nil || r.Job.Finished == nil {
				continue
			}
			if now.Sub(*r.Job.Finished) >= m.o.Retention && r.Job.CallbackState != "pending" {
				m.o.Store.Delete(ctx, kv.Key)
			}
		}
	}
	m.mu.Lock()
	if !m.closing {
		m.janitor = m.clock.AfterFunc(m.sweepEvery(), m.sweep)
	}
	m.mu.Unlock()
}
