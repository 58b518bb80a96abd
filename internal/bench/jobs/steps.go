package jobs

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// twoSteps is the body of a two-step job, as a judge's compile and run.
var twoSteps = `{"image":"` + kit.BenchImage + `","steps":[{"args":["echo","compile"]},{"args":["echo","run"]}]}`

// twoStepJob submits a two-step job and waits for its result.
func twoStepJob(ctx context.Context, e *kit.Daemon) (map[string]time.Duration, error) {
	j, err := postJob(ctx, e, twoSteps)
	if err != nil {
		return nil, err
	}
	if !j.OK || len(j.Steps) != 2 || j.Steps[0].Stdout != "compile\n" || j.Steps[1].Stdout != "run\n" {
		return nil, fmt.Errorf("job %s: %s %+v", j.ID, j.State, j.Steps)
	}
	return nil, nil
}

// twoStepTable times two-step jobs at one client on shoal and, if given,
// the earlier shoal, against the two commands run one after the other as
// bare processes, in interleaved rounds of n jobs each.
func twoStepTable(ctx context.Context, o bench.Options, rounds, n int, busybox string, cli, prev *kit.Daemon, before string) (bench.Table, error) {
	bare := jobsSubject{name: "bare processes, one after the other", command: busybox + " echo hello; " + busybox + " echo hello (stdout to a pipe, one after the other)",
		run: func(ctx context.Context, _ int) (map[string]time.Duration, error) {
			if _, err := bareProcess(ctx, busybox); err != nil {
				return nil, err
			}
			return bareProcess(ctx, busybox)
		}}
	subjects := []jobsSubject{
		{name: "shoal two-step job", command: "POST /v1/jobs?wait=true " + twoSteps,
			run: func(ctx context.Context, _ int) (map[string]time.Duration, error) { return twoStepJob(ctx, cli) }},
		bare,
	}
	if prev != nil {
		subjects = append(subjects, jobsSubject{name: "shoal two-step job (before)", command: "POST /v1/jobs?wait=true " + twoSteps + " to " + before,
			run: func(ctx context.Context, _ int) (map[string]time.Duration, error) { return twoStepJob(ctx, prev) }})
	}
	t := bench.Table{Title: "Two-step jobs, 1 client", Unit: "ms", Baseline: bare.name,
		Note: "A job of two steps (`echo compile`, then `echo run`), as a judge compiles then runs a submission: from the client sending it to the client holding both results. The bare row runs the two commands one after the other on the host."}
	lat := map[string][]time.Duration{}
	errs := map[string]string{}
	var seq atomic.Int64
	for k := -1; k < rounds; k++ {
		for _, s := range subjects {
			if errs[s.name] != "" {
				continue
			}
			bench.Settle(ctx, bench.SettleIdle, bench.SettleWindow, bench.SettleMax)
			o.Logf("jobs: %s: round %d/%d", s.name, k+1, rounds)
			r, err := burst(ctx, s, 1, n, &seq)
			if err != nil {
				if ctx.Err() != nil {
					return t, ctx.Err()
				}
				errs[s.name] = err.Error()
				continue
			}
			if k >= 0 {
				lat[s.name] = append(lat[s.name], r.latency...)
			}
		}
	}
	for _, s := range subjects {
		t.Rows = append(t.Rows, bench.Row{Name: s.name, Command: s.command, Values: bench.Millis(lat[s.name]...), Err: errs[s.name]})
	}
	return t, nil
}
