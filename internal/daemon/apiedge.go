package daemon

import (
	"context"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/jobs"
)

// jobsAPI serves the job queue to the API: the queue keeps its own job
// records, the API answers with the wire types.
type jobsAPI struct{ m *jobs.Manager }

func (a jobsAPI) Submit(ctx context.Context, reqs []types.JobRequest) ([]types.Job, error) {
	js, err := a.m.Submit(ctx, reqs)
	return jobs.WireJobs(js), err
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
