// Package fastcontainer is the fastcontainer benchmark suite: FastContainer's
// experiment 1 (Apache and PHP's phpinfo() at 0.3 of a core, loaded by ab
// with 100 concurrent connections) on Debian's own packages behind shoal's
// proxy, with shoal's autoscaler deciding the scale-up (a raised CPU
// quota) and the scale-out (a second replica), reported beside the paper's
// figures; and its experiment 2 (a slow-booting framework app's cold start
// against its restore from a CRIU image) with the slowboot example and a
// Django project from Debian's python3-django, cold, restored from the
// checkpoint tier, thawed from the frozen tier and warm.
package fastcontainer

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

const title = "FastContainer's experiment 1: Apache and PHP scaled under ab"

func init() {
	bench.Register(bench.Suite{Name: "fastcontainer", Title: title, Run: FastContainer})
}

// The suite's daemon network and cgroup parent, apart from the other
// suites'.
var fcNet = kit.DaemonNet{Bridge: "shoalbf0", Subnet: "10.191.0.0/16", CgroupParent: "/shoal-bench-fastcontainer"}

// The paper's setting: 30 % of a core doubled to 60 %, one container to
// two, ab with 100 concurrent connections.
const (
	baseCPU     = 0.3
	raisedCPU   = 0.6
	concurrency = 100
)

// runSpec is one ab run against a fresh deployment of the apache-php
// example.
type runSpec struct {
	app      string
	what     string  // for the report
	max      int     // [scale] max
	maxCPU   float64 // [resources] max_cpu
	requests int     // ab's count; with timed, only a cap
	// timed: the load ends quickTail after the 2nd container is ready
	// (or at the run's time limit), not at a count, so that requests
	// start in whole seconds after the scale-out however fast the replies
	// come. Quick mode's scale-out run is timed.
	timed bool
}

// quickTail is how long a timed run's load goes on after its 2nd
// container was ready.
const quickTail = 5 * time.Second

// runs are the suite's runs: one container that cannot scale (the
// paper's reference), scale-up alone (the paper's second experiment) and
// scale-up with scale-out (what an app with both bounds gets).
func runs(quick bool) []runSpec {
	n := func(full, q int) int {
		if quick {
			return q
		}
		return full
	}
	return []runSpec{
		{app: "fc-one", what: "one container at 0.3 cores, no scaling", max: 1, maxCPU: baseCPU, requests: n(4000, 300)},
		{app: "fc-up", what: "scale-up: one container, 0.3 cores up to 0.6", max: 1, maxCPU: raisedCPU, requests: n(6000, 800)},
		{app: "fc-out", what: "scale-up and scale-out: 0.3 cores up to 0.6, up to 2 containers", max: 2, maxCPU: raisedCPU, requests: n(10000, 50000), timed: quick},
	}
}

// env is the suite's daemon with the apache-php image imported.
type env struct {
	*kit.ServingEnv
	image string
}

// FastContainer runs the suite: the apache-php example deployed once per
// run and loaded with ab through the proxy.
func FastContainer(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("fastcontainer: the shoal binary under test is required")
	}
	rep := bench.NewReport(ctx, "fastcontainer", title, o)
	dir, err := o.ScratchDir("fastcontainer")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	se, err := kit.NewServingEnv(ctx, o, dir, fcNet, "slowboot")
	if err != nil {
		return nil, fmt.Errorf("fastcontainer: %w", err)
	}
	e := &env{ServingEnv: se}
	defer func() {
		if err := e.Close(context.WithoutCancel(ctx)); err != nil && retErr == nil {
			retErr = fmt.Errorf("fastcontainer: %w", err)
		}
	}()
	if e.image, err = e.DebianImage(ctx, "apache-php"); err != nil {
		return nil, fmt.Errorf("fastcontainer: %w", err)
	}
	var results []result
	for _, s := range runs(o.Quick) {
		res, err := e.run(ctx, s)
		if err != nil {
			return rep, fmt.Errorf("fastcontainer: %s: %w", s.app, err)
		}
		results = append(results, res)
	}
	render(rep, results)
	rep.Heading("Experiment 2: slow-booting apps restored from a checkpoint")
	if err := e.restores(ctx, rep); err != nil {
		return rep, fmt.Errorf("fastcontainer: experiment 2: %w", err)
	}
	return rep, nil
}
