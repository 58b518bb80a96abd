// Package serving is the serving benchmark suite: cold start and thaw to
// first byte, the proxy beside nginx and a direct connection under wrk, the
// autoscaler's reaction to a step in load, and the classic scale-out and
// scale-up experiments under ab, with targets and their verdicts.
package serving

import (
	"context"
	"fmt"
	"os"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

func init() {
	bench.Register(bench.Suite{Name: "serving", Title: "Serving: cold starts, thaws, the proxy and autoscaling", Run: Serving})
}

// The serving suite's daemon network and cgroup parent, apart from the
// other suites', and an HTTPS listener for the HTTPS part.
var servingNet = kit.DaemonNet{Bridge: "shoalbv0", Subnet: "10.185.0.0/16", CgroupParent: "/shoal-bench-serving",
	Args: []string{"--proxy-tls", "127.0.0.1:0"}}

// env is the suite's daemon and apps, with the suite's own steps.
type env struct{ *kit.ServingEnv }

// Serving runs the serving suite: cold start and thaw to first byte, the
// proxy beside nginx and a direct connection under wrk, the reaction of
// the autoscaler to a step in load, and the classic scale-out and scale-up
// experiments under ab.
func Serving(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("serving: the shoal binary under test is required")
	}
	rep := bench.NewReport(ctx, "serving", "Serving: cold starts, thaws, the proxy and autoscaling", o)
	dir, err := o.ScratchDir("serving")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	se, err := kit.NewServingEnv(ctx, o, dir, servingNet, "hello", "slowboot", "cpuburn", "grpcecho")
	if err != nil {
		return nil, fmt.Errorf("serving: %w", err)
	}
	e := &env{se}
	defer func() {
		if err := e.Close(context.WithoutCancel(ctx)); err != nil && retErr == nil {
			retErr = fmt.Errorf("serving: %w", err)
		}
	}()
	rep.Para("Every figure here comes from one run of the real `shoal daemon` (runc, an embedded store, replicas on its own bridge) " +
		"and its proxy on loopback, with the example apps *hello* (answers at once), *slowboot* (listens only after a 1.5 s boot) " +
		"and *cpuburn* (`/?ms=N` burns N ms of CPU per request), and *grpcecho* (a gRPC server) for HTTP/2. Requests name the app in their `Host` header (`<app>.localhost`).")
	for _, part := range []struct {
		name string
		run  func(context.Context, *bench.Report) error
	}{
		{"cold start and thaw", e.coldAndThaw},
		{"proxy throughput", e.throughput},
		{"HTTP/2 and gRPC", e.edge},
		{"HTTPS", e.https},
		{"load step", e.loadStep},
		{"scale-out and scale-up", e.classic},
	} {
		if err := part.run(ctx, rep); err != nil {
			return rep, fmt.Errorf("serving: %s: %w", part.name, err)
		}
	}
	e.summary(rep)
	return rep, nil
}
