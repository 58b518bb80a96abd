package stateful

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
)

// render adds the suite's tables, the comparison with the published
// figures and what the runs saw.
func (e *env) render(rep *bench.Report, rows []bench.Row, sides []runSide, deployed time.Duration) {
	rep.Para("Every figure here comes from one run of the real `shoal daemon` (runc, an embedded store, replicas on its own bridge) "+
		"with `examples/galera/shoal.toml` deployed on it: three members of Debian bookworm's `mariadb-server` 10.11 and `galera-4` 26.4 "+
		"(image `scripts/debian-images.sh galera`), each an ordinal of a `[stateful]` app with its own datadir volume, 1 CPU and 512 MiB. "+
		"Clients reach them through the proxy's TCP route. The cluster was whole (3 members, each `Synced`) %s after the deploy began "+
		"(galera-0 initialises and starts the cluster, each next member joins once the one before is synced and copies the datadir by rsync). "+
		"In each run, sysbench's `oltp_read_write` (%d threads, 1 table of 1000 rows, errors ignored and counted; runs of %s one after "+
		"another) and a writer (one `INSERT` a statement, one client, each commit it saw recorded) load the cluster through the proxy; %s "+
		"later one member's `mariadbd` is killed with SIGKILL (the first run's is galera-0, the member that started the cluster, then "+
		"galera-1 and galera-2): shoal starts its ordinal again on its volume, and it catches up from the others. The load goes on until "+
		"the cluster is whole again; then every row the writer saw committed is read back on every member.",
		deployed.Round(time.Second), sbThreads, sbChunk, e.killWait())

	timeTab := bench.Table{Title: "Until 3 synced members again", Unit: "s",
		Note: "From the SIGKILL of one member's mariadbd until shoal lists the 3 ordinals ready and each member answers " +
			"`wsrep_cluster_size` 3 and `wsrep_local_state_comment` Synced (polled every 250 ms), under the load.",
		Rows: rows}
	rep.Table(timeTab)

	sbRow := bench.Row{Name: rowSB, Command: fmt.Sprintf("sysbench oltp_read_write run --threads=%d --time=%d --mysql-ignore-errors=all, again and again",
		sbThreads, int(sbChunk/time.Second))}
	wRow := bench.Row{Name: rowWriter, Command: "mariadb -e 'INSERT INTO committed VALUES (...)', one after another"}
	crashed, rowsKept := 0, 0
	for _, s := range sides {
		if s.sbTxns >= 0 && s.sbTxns+s.sbFailed > 0 {
			sbRow.Values = append(sbRow.Values, 100*float64(s.sbFailed)/float64(s.sbTxns+s.sbFailed))
		}
		if s.wAttempts > 0 {
			wRow.Values = append(wRow.Values, 100*float64(s.wFailed)/float64(s.wAttempts))
		}
		crashed += s.sbCrashed
		rowsKept += s.rows
	}
	if len(sbRow.Values) == 0 {
		sbRow.Err = "every sysbench run ended without its summary (a crash in its reconnect)"
	}
	if len(wRow.Values) == 0 {
		wRow.Err = "no run completed"
	}
	for _, w := range rows {
		if w.Err != "" {
			sbRow.Err, wRow.Err = "the failover did not complete: "+w.Err, "the failover did not complete: "+w.Err
			sbRow.Values, wRow.Values = nil, nil
		}
	}
	failTab := bench.Table{Title: "Failed transactions during the failover", Unit: "%",
		Note: "Transactions that failed (sysbench: errors it ignored and counted, a transaction each; the writer: statements that " +
			"returned an error) over all transactions of the run, from " + e.killWait().String() + " before the kill until the cluster was whole again.",
		Rows: []bench.Row{sbRow, wRow}}
	rep.Table(failTab)

	rec, sbF, wF := timeTab.Row(rowRecover).Stats(), sbRow.Stats(), wRow.Stats()
	s := func(v float64) string {
		if math.IsNaN(v) {
			return "n/a"
		}
		return bench.FormatValue(v) + " s"
	}
	pct := func(v float64) string {
		if math.IsNaN(v) {
			return "n/a"
		}
		return fmt.Sprintf("%.2f %%", v)
	}
	rep.Heading("Beside the published figures")
	var b strings.Builder
	b.WriteString("| measure | shoal, median | shoal, worst run | published: containers | published: VMs |\n")
	b.WriteString("|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| a killed member until the cluster is whole again | %s | %s | %s | %s |\n",
		s(rec.Median), s(rec.Max), s(pubRecoverS), s(pubRecoverVMsS))
	fmt.Fprintf(&b, "| failed transactions, sysbench oltp_read_write | %s | %s | %s | – |\n", pct(sbF.Median), pct(sbF.Max), pct(pubFailedPct))
	fmt.Fprintf(&b, "| failed transactions, single-row writer | %s | %s | – | – |\n\n", pct(wF.Median), pct(wF.Max))
	rep.Markdown(b.String())
	rep.Para("The published figures are the containerized-DevOps paper's MySQL Galera cluster (1.8 %% of its requests failed, " +
		"32 s to recover a MySQL instance in a container, 74 s on a VM) and were **not measured here**: other hardware, another " +
		"load, and its time is to a recovered instance, where this one waits for the killed member to be `Synced` again (its IST " +
		"from a donor included) and for shoal to list it ready (its health check, then `ready_command`). The host of this run is shared " +
		"and loaded: the times are an upper bound.")
	var p []string
	if rowsKept > 0 {
		p = append(p, fmt.Sprintf("In every run each row the writer saw committed (%d in all) was found on all 3 members afterwards: none was lost.", rowsKept))
	}
	var per []string
	for _, sd := range sides {
		if sd.sbTxns >= 0 {
			per = append(per, fmt.Sprintf("%s killed: %d transactions, %d ignored errors", sd.victim, sd.sbTxns, sd.sbFailed))
		}
	}
	if len(per) > 0 {
		p = append(p, "sysbench counts an error each time a statement fails, and with errors ignored a thread goes on at once: "+
			"a connection that keeps failing adds errors fast (by run: "+strings.Join(per, "; ")+").")
	}
	if crashed > 0 {
		p = append(p, fmt.Sprintf("%d sysbench run(s) of %s ended without a summary (sysbench 1.0.20 may crash when it reconnects "+
			"after a member's connection is reset): their transactions are not counted; the writer's are.", crashed, sbChunk))
	}
	if len(p) > 0 {
		rep.Para("%s", strings.Join(p, " "))
	}
}

// killWait is how long the load runs before the kill.
func (e *env) killWait() time.Duration {
	if e.quick {
		return killAtQuick
	}
	return killAt
}
