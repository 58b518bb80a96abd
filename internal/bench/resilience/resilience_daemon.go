package resilience

import (
	"context"
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
)

// rsDaemon is the row of a daemon crash.
const rsDaemon = "kill -9 of the daemon and its restart"

// daemonKillOnce deploys app with two ready replicas, starts the load loop,
// kills the daemon with SIGKILL, starts it again on the same folders, and
// returns the milliseconds from the kill until the new daemon lists both
// replicas ready again, the same processes (its proxy, a process of its
// own, served them all along).
func (e *env) daemonKillOnce(ctx context.Context, app string) (float64, resRun, error) {
	ready, err := e.twoReady(ctx, app)
	if err != nil {
		return 0, resRun{}, err
	}
	defer e.Remove(context.WithoutCancel(ctx), app)
	pids := map[string]int{ready[0].ID: ready[0].Pid, ready[1].ID: ready[1].Pid}
	l, err := e.loadOn(ctx, app, ready[0].ID, ready[1].ID)
	if err != nil {
		return 0, resRun{}, err
	}
	defer l.End()
	t0 := time.Now()
	if err := e.Daemon.Restart(ctx, syscall.SIGKILL); err != nil {
		return 0, resRun{}, fmt.Errorf("app %q: restart the daemon: %w", app, err)
	}
	err = e.WaitFor(ctx, app, 30*time.Second, "both replicas adopted", func(a types.App) bool {
		n := 0
		for _, r := range a.Replicas {
			if r.State == "ready" && pids[r.ID] == r.Pid {
				n++
			}
		}
		return n == 2 && len(a.Replicas) == 2
	})
	if err != nil {
		return 0, resRun{}, err
	}
	at := time.Now()
	time.Sleep(rsAfter)
	l.End()
	total, failed, first := l.Counts()
	return bench.Millis(at.Sub(t0))[0], resRun{total: total, failed: failed, first: first}, nil
}

// daemonKillNote reads the daemon crash's row against its target: no
// failed request.
func (e *env) daemonKillNote(rep *bench.Report, rows []bench.Row, side map[string][]resRun) {
	t := bench.Stats(nil)
	for _, w := range rows {
		if w.Name == rsDaemon && w.OK() {
			t = w.Stats()
		}
	}
	var worst, sum, n float64
	for _, r := range side[rsDaemon] {
		if r.total > 0 {
			pct := 100 * float64(r.failed) / float64(r.total)
			worst = math.Max(worst, pct)
			sum += float64(r.total)
			n++
		}
	}
	if n == 0 || math.IsNaN(t.Median) {
		return
	}
	rep.Para("A `kill -9` of the daemon under the load loop, then a new daemon on the same folders: the proxy runs in a process "+
		"of its own that the crash does not reach, so requests went on to the two replicas it knew while no daemon ran; the new "+
		"daemon adopted the proxy and both replicas (same processes) %s after the kill at the median (p99 %s, daemon start "+
		"included). Of about %.0f requests per run, %.3f %% failed in the worst run (target 0: %s; published: 1.8–5.8 %% during "+
		"a failover).", bench.FormatValue(t.Median)+" ms", bench.FormatValue(t.P99)+" ms", sum/n, worst,
		bench.Verdict(worst, func(v float64) bool { return v <= 0 }))
}
