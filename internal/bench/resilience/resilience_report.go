package resilience

import (
	"fmt"
	"math"
	"strings"

	"github.com/shoal-run/shoal/internal/bench"
)

// Row names of the command-time rows.
const (
	rsDeployCmd   = "shoal app deploy returns (rolling upgrade)"
	rsRollbackCmd = "shoal app rollback returns"
)

// Published figures the suite's results are set beside: a classic
// container-based control plane's upgrade of three controller replicas,
// its recovery of a failed one, and its failed requests during a failover.
const (
	pubUpgradeMS        = 207000
	pubRecoverMinMS     = 32000
	pubRecoverMaxMS     = 48000
	pubFailoverMinPct   = 1.8
	pubFailoverMaxPct   = 5.8
	targetReplaceMS     = 500
	targetRolloutMS     = 2000
	targetRollbackMS    = 50
	targetKillFailedPct = 0.1
)

// renderResilience adds the suite's tables, the targets beside the
// published figures, and the paragraphs that read them.
func (e *env) renderResilience(rep *bench.Report, rows []bench.Row, side map[string][]resRun) {
	rep.Heading("Time to heal, roll out and roll back")
	timeTab := bench.Table{Title: "Under load: until traffic is served as it should be", Unit: "ms", Rows: rows, Baseline: rsCold,
		Note: "*Cold start (baseline)*: the first request to an app with no replica, while the load loop runs on another app of " +
			"two replicas: the start of one replica under the same load, which a replacement cannot beat. *SIGKILL*: one of two ready replicas' process is killed from outside; timed until the first answer of a new " +
			"replica through the proxy. *Rolling upgrade*: a deploy of a new revision (another `GREETING`) of an app of three " +
			"replicas; timed from the command until all three new replicas have answered and the status API (polled every 10 ms) " +
			"shows no replica of the old revision ready, draining or starting. *Rollback*: after such an upgrade, `shoal app rollback`; " +
			"timed until the requests sent go to the previous revision's replicas only (the later of the first request sent after the " +
			"command that one of them answered and the last sent after it that the newer revision answered). The last two rows are how " +
			"long the CLI commands themselves took (process start included)."}
	cmdRow := func(name, of string) bench.Row {
		w := bench.Row{Name: name, Command: "–"}
		for _, r := range side[of] {
			w.Values = append(w.Values, r.cmd)
		}
		if len(w.Values) == 0 {
			w.Err = "the " + of + " runs did not complete"
		}
		return w
	}
	timeTab.Rows = append(timeTab.Rows, cmdRow(rsDeployCmd, rsRollout), cmdRow(rsRollbackCmd, rsRollback))
	rep.Table(timeTab)

	failTab := bench.Table{Title: "Failed requests during each", Unit: "% of the run's requests",
		Note: "Failures are transport errors, timeouts and answers other than 200 of the load loop, over the whole run (from the " +
			"steady time before the disruption until the steady time after it)."}
	requests := map[string][]float64{}
	for _, w := range rows {
		fw := bench.Row{Name: w.Name, Command: w.Command}
		for _, r := range side[w.Name] {
			if r.total > 0 {
				fw.Values = append(fw.Values, 100*float64(r.failed)/float64(r.total))
				requests[w.Name] = append(requests[w.Name], float64(r.total))
			}
		}
		if len(fw.Values) == 0 {
			fw.Err = w.Err
			if fw.Err == "" {
				fw.Err = "no run completed"
			}
		}
		failTab.Rows = append(failTab.Rows, fw)
	}
	var per []string
	for _, w := range rows {
		if n := bench.Stats(requests[w.Name]).Median; !math.IsNaN(n) {
			per = append(per, fmt.Sprintf("%s %.0f", w.Name, n))
		}
	}
	if len(per) > 0 {
		failTab.Note += " Requests per run (median): " + strings.Join(per, "; ") + "."
	}
	rep.Table(failTab)
	e.resilienceTargets(rep, timeTab, failTab, side)
}

// resilienceTargets adds the targets and the published figures beside
// the medians, and the paragraphs computed from them.
func (e *env) resilienceTargets(rep *bench.Report, timeTab, failTab bench.Table, side map[string][]resRun) {
	rep.Heading("Against the targets and the published figures")
	stat := func(t bench.Table, name string) bench.Stat {
		if w := t.Row(name); w.OK() {
			return w.Stats()
		}
		return bench.Stats(nil)
	}
	kill, roll, back := stat(timeTab, rsKill), stat(timeTab, rsRollout), stat(timeTab, rsRollback)
	killF, rollF, backF := stat(failTab, rsKill), stat(failTab, rsRollout), stat(failTab, rsRollback)
	le := func(x float64) func(float64) bool { return func(v float64) bool { return v <= x } }
	ms := func(v float64) string {
		if math.IsNaN(v) {
			return "n/a"
		}
		return bench.FormatValue(v) + " ms"
	}
	pct := func(v float64) string {
		if math.IsNaN(v) {
			return "n/a"
		}
		return fmt.Sprintf("%.3f %%", v)
	}
	var b strings.Builder
	b.WriteString("| measure | shoal, median | shoal, p99 or worst | target | verdict | published figure | published ÷ shoal (medians) |\n")
	b.WriteString("|---|---:|---:|---|---|---|---:|\n")
	fmt.Fprintf(&b, "| killed replica replaced and serving | %s | %s | ≤ %d ms | %s | 32–48 s to recover a failed controller replica | %s–%s |\n",
		ms(kill.Median), ms(kill.P99), targetReplaceMS, bench.Verdict(kill.P99, le(targetReplaceMS)),
		bench.FormatRatio(pubRecoverMinMS/kill.Median), bench.FormatRatio(pubRecoverMaxMS/kill.Median))
	fmt.Fprintf(&b, "| failed requests during the kill | %s | %s | ≤ %.1f %% | %s | 1.8–5.8 %% during a failover | – |\n",
		pct(killF.Median), pct(killF.Max), targetKillFailedPct, bench.Verdict(killF.Max, le(targetKillFailedPct)))
	fmt.Fprintf(&b, "| rolling upgrade of 3 replicas | %s | %s | ≤ %d ms | %s | 207 s to upgrade three controller replicas | %s |\n",
		ms(roll.Median), ms(roll.P99), targetRolloutMS, bench.Verdict(roll.P99, le(targetRolloutMS)), bench.FormatRatio(pubUpgradeMS/roll.Median))
	fmt.Fprintf(&b, "| failed requests during the upgrade | %s | %s | 0 | %s | – | – |\n",
		pct(rollF.Median), pct(rollF.Max), bench.Verdict(rollF.Max, le(0)))
	fmt.Fprintf(&b, "| rollback, command to traffic on the previous revision | %s | %s | ≤ %d ms | %s | – | – |\n",
		ms(back.Median), ms(back.P99), targetRollbackMS, bench.Verdict(back.P99, le(targetRollbackMS)))
	fmt.Fprintf(&b, "| failed requests during the rollback | %s | %s | 0 | %s | – | – |\n\n",
		pct(backF.Median), pct(backF.Max), bench.Verdict(backF.Max, le(0)))
	rep.Markdown(b.String())
	rep.Para("Verdicts take the p99 of the times (with %d runs, about the slowest) and the worst run's failures. The published "+
		"figures are a classic container-based setup of a cloud control plane (its controllers upgraded and failed over as containers) "+
		"and were **not measured here**: other hardware, another workload, replicas that are whole controllers rather than a small web "+
		"app. The last column only says how far apart the orders of magnitude are.", kill.N)

	var p []string
	if !math.IsNaN(kill.Median) {
		p = append(p, fmt.Sprintf("A replica killed with SIGKILL was replaced and its successor answering through the proxy %s after the "+
			"kill at the median (p99 %s): the death is seen at once through the replica's pidfd, it leaves the route table before "+
			"anything else happens, and its replacement starts without a crash back-off because it had served for longer than the "+
			"back-off. That is %s the cold start of a replica under the same load (%s at the median): %s. Of the load loop's requests, %s failed at the median and %s in the worst run (the ones in flight on the killed "+
			"replica that the proxy could not retry; first failure seen: %s).",
			ms(kill.Median), ms(kill.P99), bench.FormatRatio(timeTab.Ratio(rsKill, rsCold)), ms(timeTab.Median(rsCold)),
			healingCost(timeTab), pct(killF.Median), pct(killF.Max), firstFailure(side[rsKill])))
	}
	if !math.IsNaN(roll.Median) {
		p = append(p, fmt.Sprintf("A rolling upgrade of three replicas took %s (p99 %s) from the deploy command until all three new "+
			"replicas served and none of the old one did, with %s of the requests failing in the worst run.",
			ms(roll.Median), ms(roll.P99), pct(rollF.Max)))
	}
	if !math.IsNaN(back.Median) {
		p = append(p, fmt.Sprintf("A rollback moved the traffic to the previous revision %s after the command was started (p99 %s); "+
			"the CLI command itself returned after %s (the route changes while the daemon handles the call, before the CLI has "+
			"printed and exited). %s of the requests failed in the worst run.",
			ms(back.Median), ms(back.P99), ms(timeTab.Median(rsRollbackCmd)), pct(backF.Max)))
	}
	if len(p) > 0 {
		rep.Para("%s", strings.Join(p, " "))
	}
}

// healingCost says what a replacement costs beyond a cold start.
func healingCost(t bench.Table) string {
	d := t.Median(rsKill) - t.Median(rsCold)
	if math.IsNaN(d) {
		return "no comparison in this run"
	}
	if d <= 0 || t.Overlap(rsKill, rsCold) != "" {
		return "in this run the replacement cost no more than a cold start, within the noise"
	}
	return fmt.Sprintf("noticing the death and starting the replacement add %s to the cold start", bench.FormatValue(d)+" ms")
}

// firstFailure is the first failure of any run, or "none".
func firstFailure(runs []resRun) string {
	for _, r := range runs {
		if r.first != "" {
			return "`" + bench.OneLine(r.first) + "`"
		}
	}
	return "none"
}
