package api

import (
	"context"
	"io"

	"github.com/shoal-run/shoal/internal/api/types"
)

// Apps is what the API needs of the serving service.
type Apps interface {
	Deploy(ctx context.Context, req types.DeployRequest) (types.App, error)
	List(ctx context.Context) ([]types.App, error)
	Get(ctx context.Context, name string) (types.App, error)
	Scale(ctx context.Context, name string, req types.ScaleRequest) (types.App, error)
	// Rollback sends all traffic to an earlier revision at once.
	Rollback(ctx context.Context, name string, req types.RollbackRequest) (types.App, error)
	// SetTraffic splits traffic between revisions.
	SetTraffic(ctx context.Context, name string, req types.TrafficRequest) (types.App, error)
	// Logs writes the lines of the app's replicas that req selects; with
	// req.Follow, until ctx ends (w is then an http.Flusher).
	Logs(ctx context.Context, name string, req types.LogsRequest, w io.Writer) error
	Remove(ctx context.Context, name string) error
}

// Events is what the API needs of the event log. List returns the events
// after seq (0: from the oldest kept), for one app or all ("" app); Watch
// streams those and every later one until ctx ends.
type Events interface {
	List(ctx context.Context, after int64, app string) ([]types.Event, error)
	Watch(ctx context.Context, after int64, app string) (<-chan types.Event, error)
}
