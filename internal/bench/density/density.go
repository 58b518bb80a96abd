// Package density is the density benchmark suite: many small apps on one
// host (the hello example, min 1 then min 0), measured at several sizes:
// what ready and frozen replicas cost the daemon at rest, memory per
// replica, how fast a burst of deploys becomes ready, a restart with N
// replicas, and a Zipf run from the harness's open-loop load generator.
// Other parts (the first-visit burst) add themselves to parts.
package density

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

func init() {
	bench.Register(bench.Suite{Name: "density", Title: "Density: thousands of small apps on one host", Run: Density})
}

// The suite's daemon network and cgroup parent; the baseline daemon's.
// BENCH_DENSITY_NET=K (1 to 9) moves both to bridges shoalbd(2K) and
// shoalbd(2K+1), subnets 10.(200+2K).0.0/16 and the next, and cgroup
// parents ending in -K, so that two runs on one host stay apart.
var (
	densityNet  = kit.DaemonNet{Bridge: "shoalbd0", Subnet: "10.187.0.0/16", CgroupParent: "/shoal-bench-density"}
	baselineNet = kit.DaemonNet{Bridge: "shoalbd1", Subnet: "10.188.0.0/16", CgroupParent: "/shoal-bench-density-base"}
)

// nets returns the daemon's and the baseline's networks (BENCH_DENSITY_NET).
func nets() (test, base kit.DaemonNet, err error) {
	v := os.Getenv("BENCH_DENSITY_NET")
	if v == "" {
		return densityNet, baselineNet, nil
	}
	k, err := strconv.Atoi(v)
	if err != nil || k < 1 || k > 9 {
		return test, base, fmt.Errorf("BENCH_DENSITY_NET: %q is not a number from 1 to 9", v)
	}
	at := func(i int, cg string) kit.DaemonNet {
		return kit.DaemonNet{Bridge: fmt.Sprintf("shoalbd%d", i), Subnet: fmt.Sprintf("10.%d.0.0/16", 200+i), CgroupParent: fmt.Sprintf("%s-%d", cg, k)}
	}
	return at(2*k, densityNet.CgroupParent), at(2*k+1, baselineNet.CgroupParent), nil
}

// part is one measurement at size n, on env e, writing into rep.
type part struct {
	name string
	run  func(e *env, ctx context.Context, n int, rep *bench.Report) error
}

// parts run in order at each size, after the n apps are deployed and
// ready (min 1); a part leaves the apps as it found them or says so.
// The first-visit burst adds its part here.
var parts = []part{
	{"idle ready", (*env).idleReady},
	{"memory", (*env).memory},
	{"restart", (*env).restart},
	{"idle frozen", (*env).idleFrozen},
	{"zipf", (*env).zipf},
}

// alone are the parts that need none of the apps grow deploys.
var alone = map[string]bool{}

// selected are the parts to run: those BENCH_DENSITY_PARTS names
// (comma-separated), else all.
func selected() ([]part, error) {
	v := os.Getenv("BENCH_DENSITY_PARTS")
	if v == "" {
		return parts, nil
	}
	var out []part
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		i := slices.IndexFunc(parts, func(p part) bool { return p.name == f })
		if i < 0 {
			return nil, fmt.Errorf("BENCH_DENSITY_PARTS: %q is not a part (%s)", f, partNames())
		}
		out = append(out, parts[i])
	}
	return out, nil
}

func partNames() string {
	var ns []string
	for _, p := range parts {
		ns = append(ns, p.name)
	}
	return strings.Join(ns, ", ")
}

// sizes are the app counts measured: BENCH_DENSITY_N (comma-separated),
// else 100 and 500, 20 in quick mode.
func sizes(o bench.Options) ([]int, error) {
	if v := os.Getenv("BENCH_DENSITY_N"); v != "" {
		var out []int
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 1000 {
				return nil, fmt.Errorf("BENCH_DENSITY_N: %q is not a count from 1 to 1000", f)
			}
			if len(out) > 0 && n <= out[len(out)-1] {
				return nil, fmt.Errorf("BENCH_DENSITY_N: %q: counts must grow", v)
			}
			out = append(out, n)
		}
		return out, nil
	}
	if o.Quick {
		return []int{20}, nil
	}
	return []int{100, 500}, nil
}

// env is the daemon under test with its apps, and the baseline daemon
// (BENCH_DENSITY_BASELINE, a shoal binary) measured beside it.
type env struct {
	*kit.ServingEnv
	base   *kit.ServingEnv
	o      bench.Options
	net    kit.DaemonNet // the daemon's
	window time.Duration // an idle measurement's length
	apps   int           // deployed so far, named d0001...
	rows   map[string]*sizeRow
	idle   []bench.Row
}

// last is the env of the last run, for the suite's test.
var last *env

// sizeRow is what one size measured, for the summary table.
type sizeRow struct {
	n                                    int
	deploy, startRate                    float64 // s from the first deploy to all ready; replicas/s
	memCgroup, memDaemon                 float64 // MiB per replica
	restartAPI, restartAll               float64 // s
	ready, readyBase, frozen             float64 // % of a core, median window
	zipfSent, zipfOK, zipfFailed         int
	zipfP50, zipfP99, firstP50, firstP99 float64
	zipfCodes                            string
	notes                                []string
}

// Density runs the density suite.
func Density(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("density: the shoal binary under test is required")
	}
	ns, err := sizes(o)
	if err != nil {
		return nil, err
	}
	sel, err := selected()
	if err != nil {
		return nil, err
	}
	grown := slices.ContainsFunc(sel, func(p part) bool { return !alone[p.name] })
	rep := bench.NewReport(ctx, "density", "Density: thousands of small apps on one host", o)
	dir, err := o.ScratchDir("density")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	testNet, baseNet, err := nets()
	if err != nil {
		return nil, err
	}
	se, err := kit.NewServingEnv(ctx, o, filepath.Join(dir, "test"), testNet, "hello")
	if err != nil {
		return nil, fmt.Errorf("density: %w", err)
	}
	e := &env{ServingEnv: se, o: o, net: testNet, window: 60 * time.Second, rows: map[string]*sizeRow{}}
	last = e
	bursts = nil
	if o.Quick {
		e.window = 10 * time.Second
	}
	defer func() {
		// A cleanup that leaves something behind is said, in the log and
		// under the figures, which it does not spoil.
		for _, x := range []*kit.ServingEnv{e.ServingEnv, e.base} {
			if x == nil {
				continue
			}
			if err := x.Daemon.Close(context.WithoutCancel(ctx)); err != nil {
				o.Logf("density: %v", err)
				rep.Para("Cleanup after the run: %v", err)
			}
		}
		kit.RemoveCgroups(testNet.CgroupParent, baseNet.CgroupParent)
	}()
	if b := os.Getenv("BENCH_DENSITY_BASELINE"); b != "" {
		bo := o
		bo.ShoalBin = b
		if e.base, err = kit.NewServingEnv(ctx, bo, filepath.Join(dir, "base"), baseNet, "hello"); err != nil {
			return nil, fmt.Errorf("density: baseline %s: %w", b, err)
		}
	}
	rep.Para("Every figure comes from one run of the real `shoal daemon` (runc, an embedded store, replicas on its own bridge), "+
		"every app the hello example with `min = 1`, `max = 2`, `idle_timeout = \"5s\"`, `freeze_timeout = \"1h\"`; sizes %v. "+
		"A daemon's CPU is its process's utime + stime from /proc/PID/stat (the proxy process apart), over windows of 10 s.", ns)
	var done []int
	for _, n := range ns {
		o.Logf("density: %d apps", n)
		if !grown {
			// No part selected needs the apps.
		} else if err := e.grow(ctx, n); err != nil {
			e.summary(rep, done)
			return rep, fmt.Errorf("density: %d apps: %w", n, err)
		}
		for _, p := range sel {
			o.Logf("density: %d apps: %s", n, p.name)
			if err := p.run(e, ctx, n, rep); err != nil {
				e.summary(rep, done)
				return rep, fmt.Errorf("density: %d apps: %s: %w", n, p.name, err)
			}
		}
		done = append(done, n)
	}
	e.summary(rep, done)
	return rep, nil
}

// row returns size n's row.
func (e *env) row(n int) *sizeRow {
	k := strconv.Itoa(n)
	if e.rows[k] == nil {
		e.rows[k] = &sizeRow{n: n}
	}
	return e.rows[k]
}
