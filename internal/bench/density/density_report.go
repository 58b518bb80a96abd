package density

import (
	"fmt"
	"os"
	"strings"

	"github.com/shoal-run/shoal/internal/bench"
)

// Titles of the suite's tables.
const (
	idleTitle    = "Daemon CPU at rest"
	summaryTitle = "By number of apps"
)

// summary writes the idle table and the table by size for the sizes done.
func (e *env) summary(rep *bench.Report, done []int) {
	defer burstSummary(rep)
	note := "% of one core used by the `shoal daemon` process (utime + stime from /proc) in 10 s windows, no request; " +
		"ready: every app has one ready replica (`min = 1`); frozen: every app scaled to `min = 0`, its replica frozen after `idle_timeout`."
	if b := os.Getenv("BENCH_DENSITY_BASELINE"); b != "" {
		note += " A baseline row is the same apps on a second daemon from the binary " + b + ", measured in the same windows."
	}
	if len(e.idle) > 0 {
		rep.Table(bench.Table{Title: idleTitle, Unit: "% of a core", Note: note, Rows: e.idle})
	}
	if len(done) == 0 {
		return
	}
	z := e.zipfLoad()
	var b strings.Builder
	b.WriteString("#### " + summaryTitle + "\n\n")
	fmt.Fprintf(&b, "Deploy burst: the apps not yet deployed, `shoal app deploy --detach` 8 at a time, timed to every app ready. "+
		"Memory: the replicas' cgroup parent (memory.usage_in_bytes) and the daemon's VmRSS, divided by the replicas. "+
		"Restart: `kill -9` of the daemon, to its API answering and to every app's replica adopted and ready. "+
		"Zipf: the harness's open-loop generator, %g requests/s for %s, s = %g, seed %d, at most %d in flight, over every app, "+
		"their replicas frozen at the start; first = each app's first request.\n\n", z.Rate, z.Duration, z.S, z.Seed, z.InFlight)
	b.WriteString("| apps | deploy burst (s) | starts/s | ready idle (% core) | per ready replica | frozen idle (% core) | per frozen replica | " +
		"MiB/replica (cgroups) | daemon RSS MiB/replica | restart: API (s) | restart: all adopted (s) | Zipf sent | failed | p50 ms | p99 ms | first p50 ms | first p99 ms |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range done {
		r := e.row(n)
		f := bench.FormatValue
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d%s | %s | %s | %s | %s |\n",
			n, f(r.deploy), f(r.startRate), f(r.ready), f(r.ready/float64(n)), f(r.frozen), f(r.frozen/float64(n)),
			f(r.memCgroup), f(r.memDaemon), f(r.restartAPI), f(r.restartAll), r.zipfSent, r.zipfFailed, codes(r.zipfCodes),
			f(r.zipfP50), f(r.zipfP99), f(r.firstP50), f(r.firstP99))
	}
	rep.Markdown(b.String() + "\n") // a blank line ends the table
	for _, n := range done {
		r := e.row(n)
		if r.readyBase > 0 {
			rep.Para("At %d ready replicas and no request the daemon used %s %% of a core (median of the 10 s windows), the baseline %s %% "+
				"(target < 5 %% at 500: %s).", n, bench.FormatValue(r.ready), bench.FormatValue(r.readyBase),
				bench.Verdict(r.ready, func(v float64) bool { return v < 5 }))
		}
	}
}

func codes(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
