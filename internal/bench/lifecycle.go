package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

func init() {
	Register(Suite{Name: "lifecycle", Title: "Lifecycle: one container from creation to removal", Run: Lifecycle})
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

func lifecycleDefaults(o Options) (Options, error) {
	o, err := o.withDefaults("lifecycle")
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
func Lifecycle(ctx context.Context, o Options) (_ *Report, retErr error) {
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
	rep := NewReport(ctx, "lifecycle", "Lifecycle: one container from creation to removal", o)
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
	if err := MakeBusyboxRootfs(rootfs); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	podmanRootfs := filepath.Join(dir, "rootfs-podman")
	if err := MakeBusyboxRootfs(podmanRootfs); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}

	bare, err := newRuncBaseline(ctx, dir, rootfs, "runc", nil)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	cleanups = append(cleanups, bare.cleanup)
	// The same bundle with shoal's default seccomp allowlist: runc doing the
	// security work shoal asks of it, without shoal.
	bareSeccomp, err := newRuncBaseline(ctx, dir, rootfs, "runc-seccomp", runtime.DefaultSeccomp())
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	cleanups = append(cleanups, bareSeccomp.cleanup)
	podman, err := newPodmanBaseline(podmanRootfs, "runc")
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	podmanCrun, _ := newPodmanBaseline(podmanRootfs, "crun")
	cleanups = append(cleanups, podman.cleanup, podmanCrun.cleanup)

	fmt.Fprintf(o.Out, "lifecycle: starting %s daemon\n", o.ShoalBin)
	cli, err := startDaemon(ctx, o.ShoalBin, filepath.Join(dir, "daemon"))
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	cleanups = append(cleanups, cli.close)
	if _, err := cli.cli(ctx, "image", "build", rootfs, "--tag", benchImage); err != nil {
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
	splitPhases := []string{phaseNet, phaseCreate, phaseStart, phaseExec, phaseDelete, phaseTotal}
	runArgs := []string{benchImage, "/bin/true"}
	subjects := []subject{
		{key: keyShoalRunNone, name: "shoal run (network none)", command: "shoal run --rm " + strings.Join(runArgs, " "),
			phases: []string{phaseTotal}, run: cli.cliSubject(append([]string{"run", "--rm"}, runArgs...)...)},
		{key: keyShoalRunBridge, name: "shoal run (network bridge)", command: "shoal run --rm --network bridge " + strings.Join(runArgs, " "),
			phases: []string{phaseTotal}, run: cli.cliSubject(append([]string{"run", "--rm", "--network", "bridge"}, runArgs...)...)},
		{key: keyRuncRun, name: "bare runc run", command: bare.command("run"), phases: []string{phaseTotal}, run: bare.run},
		{key: keyRuncRunSeccomp, name: "bare runc run, shoal's seccomp allowlist", command: bare.command("run") + " (B with shoal's seccomp profile)",
			phases: []string{phaseTotal}, run: bareSeccomp.run},
		{key: keyPodmanRun, name: "podman run (runc)", command: podman.command(), phases: []string{phaseTotal}, run: podman.run},
		{key: keyPodmanCrun, name: "podman run (crun)", command: podmanCrun.command(), phases: []string{phaseTotal}, run: podmanCrun.run},
		{key: keyAPIRun, name: "shoal runtime API, Run (runc, none)", command: "Acquire(none) + Run + Wait + Delete + Release",
			phases: []string{phaseNet, phaseCreate, phaseExec, phaseDelete, phaseTotal}, run: apiRun.run},
		{key: keyAPISplitNone, name: "shoal runtime API, split (runc, none)", command: "Acquire(none) + Create + Start + Wait + Delete + Release",
			phases: splitPhases, run: splitNone.run},
		{key: keyAPISplitBridge, name: "shoal runtime API, split (runc, bridge)", command: "Acquire(bridge) + Create + Start + Wait + Delete + Release",
			phases: splitPhases, run: splitBridge.run},
		{key: keyRuncSplit, name: "bare runc, split", command: "runc create; runc start; wait for exit (pidfd); runc delete",
			phases: []string{phaseCreate, phaseStart, phaseExec, phaseDelete, phaseTotal}, run: bare.phases},
		{key: keyShoalVersion, name: "shoal CLI start-up", command: "shoal version", phases: []string{phaseTotal}, run: cli.cliSubject("version")},
		{key: keyShoalPs, name: "shoal CLI + one API call", command: "shoal ps", phases: []string{phaseTotal}, run: cli.cliSubject("ps")},
	}
	crunSubject, crunErr := env.subject(ctx, "split-crun", "crun", network.None, true)
	if crunErr == nil {
		subjects = append(subjects, subject{key: keyAPISplitCrun, name: "shoal runtime API, split (crun, none)",
			command: "Acquire(none) + Create + Start + Wait + Delete + Release (crun)", phases: splitPhases, run: crunSubject.run})
	}

	var logSkip map[string]int
	results, err := measure(ctx, "lifecycle", subjects, warmup, o.Runs, o.Out, func() {
		logSkip = cli.countLines()
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
		keyShoalRunNone:   cli.daemonPhases(logSkip),
		keyAPIRun:         apiRun.log.snapshot(),
		keyAPISplitNone:   splitNone.log.snapshot(),
		keyAPISplitBridge: splitBridge.log.snapshot(),
	}
	rep.renderLifecycle()
	if err := firstResponse(ctx, o, rep, env, dir, o.RunsOr(20, 3)); err != nil {
		return rep, fmt.Errorf("lifecycle: first response: %w", err)
	}
	return rep, nil
}

// removeCgroupParents removes the suite's (by now empty) parent cgroups in
// every hierarchy.
func removeCgroupParents(context.Context) error {
	removeCgroups(benchCgroupParent, daemonBenchCgroupParent)
	return nil
}
