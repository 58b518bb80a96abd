package resilience

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/loadloop"
)

// Bounds of the resilience suite's load loop.
const (
	loopClients  = 4
	loopPause    = time.Millisecond
	loopMaxTime  = 60 * time.Second
	loopMaxTotal = 200000
	loopTimeout  = 10 * time.Second // per request
)

// startLoop starts the suite's bounded load loop on app through the proxy:
// loopClients clients send GET / one request after another, loopPause
// apart, until End, for at most loopMaxTime and loopMaxTotal requests in
// all. The loop keeps every request and, per replica (as hello names it),
// when its first answer arrived.
func (e *env) startLoop(ctx context.Context, app string) (*loadloop.Loop, error) {
	l, err := loadloop.Start(ctx, loadloop.Options{Clients: loopClients, Pause: loopPause, MaxTime: loopMaxTime,
		MaxTotal: loopMaxTotal, Timeout: loopTimeout}, func(ctx context.Context) (string, error) {
		_, _, body, err := e.Request(ctx, app, "/")
		return loadloop.HelloReplica(body), err
	})
	if err != nil {
		return nil, fmt.Errorf("app %q: %w", app, err)
	}
	return l, nil
}
