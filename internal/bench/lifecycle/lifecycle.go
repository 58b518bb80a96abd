// Package lifecycle is the lifecycle benchmark suite: a container's life
// from creation to removal, `shoal run --rm` through the real CLI and
// daemon, the runtime API's phases in-process (create, start, exec,
// delete), bare `runc run` and its phases, and `podman run --rm` of the same
// root filesystem; and the first HTTP response of the hello example app
// (shoal with network none and bridge, a bare process, bare runc, podman;
// crun where it works).
package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

// title is the suite's section heading.
const title = "Lifecycle: one container from creation to removal"

func init() {
	bench.Register(bench.Suite{Name: "lifecycle", Title: title, Run: Lifecycle})
}

// Subject keys of the lifecycle suite.
const (
	keyShoalRunNone   = "shoal-run-none"
	keyShoalRunBridge = "shoal-run-bridge"
	keyRuncRun        = "runc-run"
	keyRuncRunSeccomp = "runc-run-seccomp"
	keyPodmanRun      = "podman-run"
	keyPodmanCrun     = "podman-run-crun"
	keyAPIRun         = "api-run-none"
	keyAPISplitNone   = "api-split-none"
	keyAPISplitBridge = "api-split-bridge"
	keyAPISplitCrun   = "api-split-none-crun"
	keyRuncSplit      = "runc-split"
	keyShoalVersion   = "shoal-version"
	keyShoalPs        = "shoal-ps"
)

func lifecycleDefaults(o bench.Options) (bench.Options, error) {
	o, err := o.WithDefaults("lifecycle")
	if err != nil {
		return o, err
	}
	o.Runs = o.RunsOr(50, 5)
	if o.ShoalBin == "" {
		return o, errdefs.Invalid("ShoalBin", "the shoal binary to measure is required")
	}
	if _, err := os.Stat(o.ShoalBin); err != nil {
		return o, errdefs.Invalid("ShoalBin", "%v", err)
	}
	return o, nil
}

// Lifecycle runs the lifecycle suite: /bin/true in a busybox container, from
// creation to removal, through shoal's CLI and daemon, through shoal's
// runtime API phase by phase (runc and crun, network none and bridge), with
// bare runc, and with podman, all in the same run and interleaved. It removes
// every container, mount, namespace and folder it made, also on error.
func Lifecycle(ctx context.Context, o bench.Options) (*bench.Report, error) {
	r, err := run(ctx, o)
	if r == nil {
		return nil, err
	}
	return r.Report, err
}

// report is the suite's section with the samples it renders from.
type report struct {
	*bench.Report
	// Runs and Warmup are the recorded and warm-up runs of each subject.
	Runs   int
	Warmup int
	// Results are the subjects' samples.
	Results []*Result
	// Inner holds durations measured inside shoal for some subjects (the
	// runtime's own debug timings), keyed by subject and then by
	// "created.bundle", "created.runtime", "deleted.runtime", ...
	Inner map[string]map[string][]time.Duration
}

// run runs the suite and returns its report with the samples.
func run(ctx context.Context, o bench.Options) (_ *report, retErr error) {
	o, err := lifecycleDefaults(o)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("lifecycle: containers need root")
	}
	warmup := 3
	if o.Quick {
		warmup = 1
	}
	rep := &report{Report: bench.NewReport(ctx, "lifecycle", title, o)}
	rep.Runs, rep.Warmup = o.Runs, warmup
	dir, err := o.ScratchDir("lifecycle")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// Clean-up runs on a context of its own so that an interrupted suite
	// still removes what it made.
	var cleanups []func(context.Context) error
	cleanups = append(cleanups, removeCgroupParents)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for i := len(cleanups) - 1; i >= 0; i-- {
			if err := cleanups[i](cctx); err != nil {
				fmt.Fprintf(o.Out, "lifecycle: cleanup: %v\n", err)
				if retErr == nil {
					retErr = err
				}
			}
		}
	}()
	if err := runtime.BecomeSubreaper(); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	fmt.Fprintf(o.Out, "lifecycle: preparing in %s\n", dir)
	rootfs := filepath.Join(dir, "rootfs")
	if err := kit.MakeBusyboxRootfs(rootfs); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	podmanRootfs := filepath.Join(dir, "rootfs-podman")
	if err := kit.MakeBusyboxRootfs(podmanRootfs); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}

	bare, err := kit.NewRunc(ctx, dir, rootfs, "runc", nil)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	cleanups = append(cleanups, bare.Cleanup)
	// The same bundle with shoal's default seccomp allowlist: runc doing the
	// security work shoal asks of it, without shoal.
	bareSeccomp, err := kit.NewRunc(ctx, dir, rootfs, "runc-seccomp", runtime.DefaultSeccomp())
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	cleanups = append(cleanups, bareSeccomp.Cleanup)
	podman, err := kit.NewPodman(podmanRootfs, "runc")
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	podmanCrun, _ := kit.NewPodman(podmanRootfs, "crun")
	cleanups = append(cleanups, podman.Cleanup, podmanCrun.Cleanup)

	fmt.Fprintf(o.Out, "lifecycle: starting %s daemon\n", o.ShoalBin)
	cli, err := kit.StartDaemon(ctx, o.ShoalBin, filepath.Join(dir, "daemon"))
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	cleanups = append(cleanups, cli.Close)
	if _, err := cli.CLI(ctx, "image", "build", rootfs, "--tag", kit.BenchImage); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}

	env, err := newAPIEnv(ctx, filepath.Join(dir, "api"), rootfs)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	cleanups = append(cleanups, env.close)
	apiRun, err := env.subject(ctx, "run", "runc", network.None, false)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	splitNone, err := env.subject(ctx, "split-none", "runc", network.None, true)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	splitBridge, err := env.subject(ctx, "split-bridge", "runc", network.Bridge, true)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	splitPhases := []string{kit.PhaseNet, kit.PhaseCreate, kit.PhaseStart, kit.PhaseExec, kit.PhaseDelete, kit.PhaseTotal}
	runArgs := []string{kit.BenchImage, "/bin/true"}
	subjects := []subject{
		{key: keyShoalRunNone, name: "shoal run (network none)", command: "shoal run --rm " + strings.Join(runArgs, " "),
			phases: []string{kit.PhaseTotal}, run: cli.CLISubject(append([]string{"run", "--rm"}, runArgs...)...)},
		{key: keyShoalRunBridge, name: "shoal run (network bridge)", command: "shoal run --rm --network bridge " + strings.Join(runArgs, " "),
			phases: []string{kit.PhaseTotal}, run: cli.CLISubject(append([]string{"run", "--rm", "--network", "bridge"}, runArgs...)...)},
		{key: keyRuncRun, name: "bare runc run", command: bare.Command("run"), phases: []string{kit.PhaseTotal}, run: bare.Run},
		{key: keyRuncRunSeccomp, name: "bare runc run, shoal's seccomp allowlist", command: bare.Command("run") + " (B with shoal's seccomp profile)",
			phases: []string{kit.PhaseTotal}, run: bareSeccomp.Run},
		{key: keyPodmanRun, name: "podman run (runc)", command: podman.Command(), phases: []string{kit.PhaseTotal}, run: podman.Run},
		{key: keyPodmanCrun, name: "podman run (crun)", command: podmanCrun.Command(), phases: []string{kit.PhaseTotal}, run: podmanCrun.Run},
		{key: keyAPIRun, name: "shoal runtime API, Run (runc, none)", command: "Acquire(none) + Run + Wait + Delete + Release",
			phases: []string{kit.PhaseNet, kit.PhaseCreate, kit.PhaseExec, kit.PhaseDelete, kit.PhaseTotal}, run: apiRun.run},
		{key: keyAPISplitNone, name: "shoal runtime API, split (runc, none)", command: "Acquire(none) + Create + Start + Wait + Delete + Release",
			phases: splitPhases, run: splitNone.run},
		{key: keyAPISplitBridge, name: "shoal runtime API, split (runc, bridge)", command: "Acquire(bridge) + Create + Start + Wait + Delete + Release",
			phases: splitPhases, run: splitBridge.run},
		{key: keyRuncSplit, name: "bare runc, split", command: "runc create; runc start; wait for exit (pidfd); runc delete",
			phases: []string{kit.PhaseCreate, kit.PhaseStart, kit.PhaseExec, kit.PhaseDelete, kit.PhaseTotal}, run: bare.Phases},
		{key: keyShoalVersion, name: "shoal CLI start-up", command: "shoal version", phases: []string{kit.PhaseTotal}, run: cli.CLISubject("version")},
		{key: keyShoalPs, name: "shoal CLI + one API call", command: "shoal ps", phases: []string{kit.PhaseTotal}, run: cli.CLISubject("ps")},
	}
	crunSubject, crunErr := env.subject(ctx, "split-crun", "crun", network.None, true)
	if crunErr == nil {
		subjects = append(subjects, subject{key: keyAPISplitCrun, name: "shoal runtime API, split (crun, none)",
			command: "Acquire(none) + Create + Start + Wait + Delete + Release (crun)", phases: splitPhases, run: crunSubject.run})
	}

	var logSkip map[string]int
	results, err := measure(ctx, "lifecycle", subjects, warmup, o.Runs, o.Out, func() {
		logSkip = cli.CountLines()
		for _, s := range []*apiSubject{apiRun, splitNone, splitBridge} {
			s.log.reset()
		}
	})
	rep.Results = results
	if crunErr != nil {
		rep.Results = append(rep.Results, &Result{Key: keyAPISplitCrun, Name: "shoal runtime API, split (crun, none)",
			Command: "runtime.New(Runtime: \"crun\") + the same calls", Phases: splitPhases, Err: crunErr.Error()})
	}
	if err != nil {
		return rep, fmt.Errorf("lifecycle: %w", err)
	}
	rep.Inner = map[string]map[string][]time.Duration{
		keyShoalRunNone:   cli.DaemonPhases(logSkip),
		keyAPIRun:         apiRun.log.snapshot(),
		keyAPISplitNone:   splitNone.log.snapshot(),
		keyAPISplitBridge: splitBridge.log.snapshot(),
	}
	rep.renderLifecycle()
	if err := firstResponse(ctx, o, rep.Report, env, dir, o.RunsOr(20, 3)); err != nil {
		return rep, fmt.Errorf("lifecycle: first response: %w", err)
	}
	return rep, nil
}

// removeCgroupParents removes the suite's (by now empty) parent cgroups in
// every hierarchy.
func removeCgroupParents(context.Context) error {
	kit.RemoveCgroups(kit.BenchCgroupParent, kit.DaemonBenchCgroupParent)
	return nil
}
