// Package jobs is the jobs benchmark suite: hello-world jobs submitted
// through shoal's API with ?wait=true against the same command run as a
// bare process on the host, bare `runc run` and `podman run --rm` per job,
// and against an earlier shoal binary (SHOAL_BENCH_BEFORE names it) on a
// daemon of its own, at 1, 2 and 8 concurrent clients, interleaved in one
// run, with the time of each phase of a step and each subject's overhead
// over the bare process; and two-step jobs at one client.
package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

func init() {
	bench.Register(bench.Suite{Name: "jobs", Title: "Jobs: sandboxed hello-world jobs, one after another and concurrent", Run: Jobs})
}

// phaseSandbox is a job's create, start and exec phases summed: its
// sandbox's own time, without the API, the queue and the store.
const phaseSandbox = "sandbox"

// jobsConcurrency are the numbers of clients submitting at once.
var jobsConcurrency = []int{1, 2, 8}

// jobsSubject runs one hello-world job and reports its submission-to-result
// latency and, for shoal, where the time went.
type jobsSubject struct {
	name, command string
	run           func(ctx context.Context, i int) (map[string]time.Duration, error)
}

// jobsRound is one burst of n jobs by c clients.
type jobsRound struct {
	rate    float64 // jobs per second over the burst
	latency []time.Duration
	phases  map[string][]time.Duration
}

// burst runs n jobs of s with c clients pulling from one counter.
func burst(ctx context.Context, s jobsSubject, c, n int, seq *atomic.Int64) (jobsRound, error) {
	r := jobsRound{phases: map[string][]time.Duration{}}
	var mu sync.Mutex
	var next atomic.Int64
	var firstErr error
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				t := time.Now()
				ph, err := s.run(ctx, int(seq.Add(1)))
				d := time.Since(t)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				r.latency = append(r.latency, d)
				for k, v := range ph {
					r.phases[k] = append(r.phases[k], v)
				}
				if c, ok := ph[kit.PhaseCreate]; ok {
					r.phases[phaseSandbox] = append(r.phases[phaseSandbox], c+ph[kit.PhaseStart]+ph[kit.PhaseExec])
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.rate = float64(n) / time.Since(t0).Seconds()
	return r, firstErr
}

// Jobs runs the jobs suite: hello-world jobs submitted through shoal's API
// with ?wait=true (the sandbox path: empty network namespace, read-only
// image, work tmpfs, limits, seccomp, output captured), against bare
// `runc run` and `podman run --rm` per job, at 1, 2 and 8 concurrent
// clients, interleaved in one run.
func Jobs(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	o, err := o.WithDefaults("jobs")
	if err != nil {
		return nil, err
	}
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("jobs: the shoal binary to measure is required")
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("jobs: containers need root")
	}
	rounds, perRound, podmanPerRound := o.RunsOr(5, 2), 40, 8
	if o.Quick {
		perRound, podmanPerRound = 8, 2
	}
	rep := bench.NewReport(ctx, "jobs", "", o)
	dir, err := o.ScratchDir("jobs")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// Searchable by the sandboxes' mapped uid, as /var/lib is: the daemon
	// then runs them in a user namespace, its default where the host
	// allows it.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	var cleanups []func(context.Context) error
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for i := len(cleanups) - 1; i >= 0; i-- {
			if err := cleanups[i](cctx); err != nil {
				o.Logf("jobs: cleanup: %v", err)
				if retErr == nil {
					retErr = err
				}
			}
		}
	}()
	rootfs := filepath.Join(dir, "rootfs")
	if err := kit.MakeBusyboxRootfs(rootfs); err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	podmanRootfs := filepath.Join(dir, "rootfs-podman")
	if err := kit.MakeBusyboxRootfs(podmanRootfs); err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	bare, err := kit.NewRunc(ctx, dir, rootfs, "jobs-runc", nil)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	cleanups = append(cleanups, bare.Cleanup)
	if err := bare.SetArgs("/bin/echo", "hello"); err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	podman, podmanErr := kit.NewPodman(podmanRootfs, "runc")
	if podmanErr == nil {
		cleanups = append(cleanups, podman.Cleanup)
	}
	o.Logf("jobs: starting %s daemon", o.ShoalBin)
	cli, err := kit.StartDaemonOn(ctx, o.ShoalBin, filepath.Join(dir, "daemon"), jobsNet)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	cleanups = append(cleanups, cli.Close)
	if _, err := cli.CLI(ctx, "image", "build", rootfs, "--tag", kit.BenchImage); err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	jobCall := `POST /v1/jobs?wait=true {"image":"` + kit.BenchImage + `","steps":[{"args":["echo","hello"]}]}`
	shoal := jobsSubject{name: "shoal job", command: jobCall,
		run: func(ctx context.Context, i int) (map[string]time.Duration, error) { return helloJob(ctx, cli, i) }}
	runc := jobsSubject{name: "bare runc run", command: bare.Command("run") + " (B runs /bin/echo hello, stdout to a pipe)",
		run: func(ctx context.Context, i int) (map[string]time.Duration, error) { return runCaptured(ctx, bare, i) }}
	busybox := filepath.Join(rootfs, "bin", "busybox")
	process := jobsSubject{name: "bare process", command: busybox + " echo hello (stdout to a pipe)",
		run: func(ctx context.Context, _ int) (map[string]time.Duration, error) { return bareProcess(ctx, busybox) }}
	subjects := []jobsSubject{shoal, process, runc}
	names := []string{"shoal job", "bare process", "bare runc run", "podman run --rm"}
	var prev *kit.Daemon
	before := os.Getenv("SHOAL_BENCH_BEFORE")
	if before != "" {
		prev, err = startBefore(ctx, o, before, filepath.Join(dir, "before"), rootfs)
		if err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
		cleanups = append(cleanups, prev.Close)
		subjects = append(subjects, jobsSubject{name: "shoal job (before)", command: jobCall + " to " + before,
			run: func(ctx context.Context, i int) (map[string]time.Duration, error) { return helloJob(ctx, prev, i) }})
		names = append(names, "shoal job (before)")
	}
	if podmanErr == nil {
		subjects = append(subjects, jobsSubject{name: "podman run --rm", command: podman.Command(), run: podman.Run})
	}

	// results[subject][c] accumulates rounds.
	type acc struct {
		rates   []float64
		latency []time.Duration
		phases  map[string][]time.Duration
		err     string
	}
	results := map[string]map[int]*acc{}
	for _, s := range subjects {
		results[s.name] = map[int]*acc{}
		for _, c := range jobsConcurrency {
			results[s.name][c] = &acc{phases: map[string][]time.Duration{}}
		}
	}
	if podmanErr != nil {
		results["podman run --rm"] = map[int]*acc{}
		for _, c := range jobsConcurrency {
			results["podman run --rm"][c] = &acc{err: podmanErr.Error()}
		}
	}
	var seq atomic.Int64
	// One warm-up burst per subject, then rounds interleaved: every
	// subject at every concurrency, round after round.
	for k := -1; k < rounds; k++ {
		for _, c := range jobsConcurrency {
			for _, s := range subjects {
				a := results[s.name][c]
				if a.err != "" {
					continue
				}
				n := perRound
				if s.name == "podman run --rm" {
					n = podmanPerRound
				}
				if k < 0 {
					n = min(n, c)
				}
				bench.Settle(ctx, bench.SettleIdle, bench.SettleWindow, bench.SettleMax)
				o.Logf("jobs: %s, %d clients: round %d/%d", s.name, c, k+1, rounds)
				var sum0, n0 float64
				if s.name == shoal.name {
					sum0, n0 = teardownMetric(ctx, cli)
				}
				r, err := burst(ctx, s, c, n, &seq)
				if err == nil && s.name == shoal.name {
					// The last step's teardown happens after the answer:
					// the daemon's metrics time it.
					if sum1, n1 := teardownMetric(ctx, cli); n1 > n0 {
						r.phases["teardown"] = []time.Duration{time.Duration((sum1 - sum0) / (n1 - n0) * float64(time.Second))}
					}
				}
				if err != nil {
					if ctx.Err() != nil {
						return rep, ctx.Err()
					}
					a.err = err.Error()
					continue
				}
				if k < 0 {
					continue
				}
				a.rates = append(a.rates, r.rate)
				a.latency = append(a.latency, r.latency...)
				for ph, v := range r.phases {
					a.phases[ph] = append(a.phases[ph], v...)
				}
			}
		}
	}

	commands := map[string]string{}
	for _, s := range subjects {
		commands[s.name] = s.command
	}
	commands["podman run --rm"] = "podman run --rm (runc) " + strings.Join(kit.PodmanFlags, " ") + " --rootfs DIR /bin/true"
	rateT := bench.Table{Title: "Throughput", Unit: "jobs/s", HigherIsBetter: true, Baseline: "bare runc run, 1 client",
		Note: fmt.Sprintf("Each value is one burst of %d jobs (%d for podman) by N clients submitting at once; the shoal daemon runs up to its job slots (two per CPU) at a time.", perRound, podmanPerRound)}
	latT := bench.Table{Title: "Submission to result", Unit: "ms", Baseline: "bare runc run, 1 client",
		Note: "Each value is one job, from the client sending it to the client holding its result (output and exit status)."}
	phaseT := bench.Table{Title: "Where a shoal job's time goes", Unit: "ms",
		Note: "From each job's result: queue (submission to the first step), create (work directory, namespace from the pool, pipes), start (overlay, bundle, runc run; in a reusable sandbox, the step's cgroup made, its stub started by the sandbox's process and moved into it, its command handed over), exec (the process, until its exit is known and what it left is killed); sandbox is the three summed per job. Teardown (container delete and namespace release) runs after the answer, while the job still holds its slot; a reusable sandbox has none there (its step's cgroup is removed, and the sandbox emptied, off the slot); its row is the mean per round from the daemon's `shoal_job_step_phase_seconds` metric."}
	var latGroups []bench.Table
	for _, c := range jobsConcurrency {
		var lt bench.Table
		for _, name := range names {
			a := results[name][c]
			row := fmt.Sprintf("%s, %d client", name, c)
			if c > 1 {
				row += "s"
			}
			base := fmt.Sprintf("bare runc run, %d client", c)
			if c > 1 {
				base += "s"
			}
			rr := bench.Row{Name: row, Command: commands[name], Values: a.rates, Err: a.err, Baseline: base}
			lr := bench.Row{Name: row, Command: commands[name], Values: bench.Millis(a.latency...), Err: a.err, Baseline: base}
			rateT.Rows = append(rateT.Rows, rr)
			latT.Rows = append(latT.Rows, lr)
			lt.Rows = append(lt.Rows, bench.Row{Name: name, Values: lr.Values, Err: a.err})
		}
		latGroups = append(latGroups, lt)
		a := results["shoal job"][c]
		for _, ph := range []string{"queue", kit.PhaseCreate, kit.PhaseStart, kit.PhaseExec, phaseSandbox, "teardown"} {
			phaseT.Rows = append(phaseT.Rows, bench.Row{Name: fmt.Sprintf("%s, %d clients", ph, c), Values: bench.Millis(a.phases[ph]...), Err: a.err})
		}
	}
	rep.Table(rateT)
	rep.Table(latT)
	groups := make([]string, len(jobsConcurrency))
	for i, c := range jobsConcurrency {
		groups[i] = fmt.Sprintf("%d clients", c)
	}
	rep.Plot("jobs-latency.svg", "median submission-to-result latency by concurrency",
		bench.BarsOf("hello-world job, submission to result (ms, median)", groups, names, latGroups))
	rep.Table(phaseT)
	ovT := overheadTable(names, commands, results["bare process"][1].latency, func(name string) ([]time.Duration, string) {
		return results[name][1].latency, results[name][1].err
	})
	rep.Table(ovT)
	rep.Para("One client: the bare process takes %s ms (median, spawn to exit with its output read); a shoal job adds %s ms to it, bare `runc run` %s ms.",
		bench.FormatValue(latT.Median("bare process, 1 client")), bench.FormatValue(ovT.Median("shoal job")), bench.FormatValue(ovT.Median("bare runc run")))
	sandbox := phaseT.Median(phaseSandbox + ", 1 clients")
	rep.Para("Of a shoal job's time at one client, its sandbox (create, start and exec, summed per job) takes %s ms at the median, %s ms over the bare process; the rest is the API round trip, the queue and the stored result.",
		bench.FormatValue(sandbox), bench.FormatValue(sandbox-latT.Median("bare process, 1 client")))
	if _, ok := results["shoal job (before)"]; ok {
		rep.Para("Against the earlier shoal in the same run: %s ms against %s ms per job at one client (%s), %s against %s jobs/s at 8 clients.",
			bench.FormatValue(latT.Median("shoal job, 1 client")), bench.FormatValue(latT.Median("shoal job (before), 1 client")),
			bench.FormatRatio(latT.Median("shoal job, 1 client")/latT.Median("shoal job (before), 1 client")),
			bench.FormatValue(rateT.Median("shoal job, 8 clients")), bench.FormatValue(rateT.Median("shoal job (before), 8 clients")))
	}
	s1, r1 := latT.Median("shoal job, 1 client"), latT.Median("bare runc run, 1 client")
	rep.Para("One client: a shoal job's result arrives in %s ms (median) against %s ms for bare `runc run` (%s); at 8 clients shoal completes %s jobs/s against %s for bare runc. The shoal figure includes the API round trip, the stored result, the sandbox's work tmpfs, limits, seccomp and output capture; bare runc runs the default `runc spec` bundle without them.",
		bench.FormatValue(s1), bench.FormatValue(r1), bench.FormatRatio(s1/r1),
		bench.FormatValue(rateT.Median("shoal job, 8 clients")), bench.FormatValue(rateT.Median("bare runc run, 8 clients")))
	stepsT, err := twoStepTable(ctx, o, rounds, perRound, busybox, cli, prev, before)
	if err != nil {
		return rep, err
	}
	rep.Table(stepsT)
	if prev != nil {
		rep.Para("A two-step job at one client: %s ms (median) against %s ms for the earlier shoal (%s) and %s ms for its two commands run bare.",
			bench.FormatValue(stepsT.Median("shoal two-step job")), bench.FormatValue(stepsT.Median("shoal two-step job (before)")),
			bench.FormatRatio(stepsT.Median("shoal two-step job")/stepsT.Median("shoal two-step job (before)")),
			bench.FormatValue(stepsT.Median("bare processes, one after the other")))
	}
	rep.Para("%s", sharedHost)
	jobsTargets(rep, rateT, latT, ovT, sandbox-latT.Median("bare process, 1 client"))
	return rep, nil
}

// sharedHost says how to read the figures of a run on a busy host.
const sharedHost = "The host may be shared with other work while the suite runs: the subjects take turns round by round, so the ratios compare like with like within one run, while absolute figures move from run to run."

// jobsTargets adds the jobs targets with their verdicts.
func jobsTargets(rep *bench.Report, rateT, latT, ovT bench.Table, sandboxOver float64) {
	rep.Heading("Targets")
	s1, r1 := latT.Median("shoal job, 1 client"), latT.Median("bare runc run, 1 client")
	rate8 := rateT.Median("shoal job, 8 clients")
	var b strings.Builder
	b.WriteString("| target | goal | measured | verdict |\n|---|---|---:|---|\n")
	row := func(what, goal, measured string, v float64, ok func(float64) bool) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", what, goal, measured, bench.Verdict(v, ok))
	}
	row("hello-world jobs per second, 8 clients (median burst)", "≥ 100", bench.FormatValue(rate8)+" jobs/s "+
		fmt.Sprintf("(1 client: %s, 2: %s)", bench.FormatValue(rateT.Median("shoal job, 1 client")), bench.FormatValue(rateT.Median("shoal job, 2 clients"))),
		rate8, func(v float64) bool { return v >= 100 })
	ov := ovT.Median("shoal job")
	row("per-job overhead over the bare process, 1 client (median)", "≤ 1 ms", bench.FormatValue(ov)+" ms", ov, func(v float64) bool { return v <= 1 })
	row("the sandbox's own (create + start + exec) over the bare process, 1 client (median)", "≤ 1 ms", bench.FormatValue(sandboxOver)+" ms", sandboxOver, func(v float64) bool { return v <= 1 })
	row("submission to result, 1 client, p50", "≤ 60 ms", bench.FormatValue(s1)+" ms", s1, func(v float64) bool { return v <= 60 })
	row("per job against bare `runc run`, 1 client (medians)", "≤ 1.30×", bench.FormatRatio(s1/r1), s1/r1, func(v float64) bool { return v <= 1.3 })
	b.WriteString("\n")
	rep.Markdown(b.String())
}

// overheadTable is each subject's latency at one client less the median of
// the bare process's: what running the command through it adds.
func overheadTable(names []string, commands map[string]string, bare []time.Duration, of func(string) ([]time.Duration, string)) bench.Table {
	t := bench.Table{Title: "Per-job overhead over the bare process, 1 client", Unit: "ms", Baseline: "bare runc run",
		Note: "Each value is one job's submission-to-result time less the median time of the same command (`busybox echo hello`, stdout to a pipe) run as a bare process on the host in the same run."}
	base := bench.Stats(bench.Millis(bare...)).Median
	for _, name := range names {
		if name == "bare process" {
			continue
		}
		lat, err := of(name)
		vals := bench.Millis(lat...)
		for i := range vals {
			vals[i] -= base
		}
		t.Rows = append(t.Rows, bench.Row{Name: name, Command: commands[name], Values: vals, Err: err})
	}
	return t
}
