package daemon

import (
	"context"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/dashboard"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/jobs"
)

// jobsAPI serves the job queue to the API: the queue keeps its own job
// records, the API answers with the wire types.
type jobsAPI struct{ m jobs.Queue }

func (a jobsAPI) Submit(ctx context.Context, reqs []types.JobRequest) ([]types.Job, error) {
	js, err := a.m.Submit(ctx, reqs)
	return jobs.WireJobs(js), err
}

func (a jobsAPI) Run(ctx context.Context, req types.JobRequest) (types.Job, error) {
	j, err := a.m.Run(ctx, req)
	return j.Wire(), err
}

func (a jobsAPI) Get(ctx context.Context, id string) (types.Job, error) {
	j, err := a.m.Get(ctx, id)
	return j.Wire(), err
}

func (a jobsAPI) Wait(ctx context.Context, id string) (types.Job, error) {
	j, err := a.m.Wait(ctx, id)
	return j.Wire(), err
}

func (a jobsAPI) List(ctx context.Context, f types.JobFilter) ([]types.Job, error) {
	js, err := a.m.List(ctx, f)
	return jobs.WireJobs(js), err
}

func (a jobsAPI) Cancel(ctx context.Context, id string) (types.Job, error) {
	j, err := a.m.Cancel(ctx, id)
	return j.Wire(), err
}

var _ api.Jobs = jobsAPI{}

// wireEvents is the event log for the API and the dashboard: the log
// keeps its own event records, they read the wire types.
type wireEvents struct{ l *events.Log }

func (a wireEvents) List(ctx context.Context, after int64, app string) ([]types.Event, error) {
	evs, err := a.l.List(ctx, after, app)
	if evs == nil {
		return nil, err
	}
	out := make([]types.Event, len(evs))
	for i, e := range evs {
		out[i] = e.Wire()
	}
	return out, err
}

// Watch passes the log's events on as the API's until the log's stream
// ends or ctx does.
func (a wireEvents) Watch(ctx context.Context, after int64, app string) (<-chan types.Event, error) {
	in, err := a.l.Watch(ctx, after, app)
	if err != nil {
		return nil, err
	}
	out := make(chan types.Event)
	go func() {
		defer close(out)
		for e := range in {
			select {
			case out <- e.Wire():
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

var (
	_ api.Events       = wireEvents{}
	_ dashboard.Events = wireEvents{}
)

// servingEvents is the event log as serving emits to it, in the API's
// event type.
type servingEvents struct{ l *events.Log }

func (s servingEvents) Emit(ctx context.Context, e types.Event) (types.Event, error) {
	r, err := s.l.Emit(ctx, events.FromWire(e))
	return r.Wire(), err
}
