package cluster

import (
	"math"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	shcluster "github.com/shoal-run/shoal/internal/cluster"
)

// Published defaults of other schedulers, quoted from their documentation
// and never run here.
const (
	// Kubernetes: the node controller marks a silent node NotReady after
	// --node-monitor-grace-period (40 s, 50 s in recent releases), and its
	// pods' default toleration of node.kubernetes.io/unreachable and
	// not-ready is 300 s: eviction about 5 min 50 s after the node died.
	k8sGrace      = 50 * time.Second
	k8sToleration = 300 * time.Second
	// Nomad: a client that misses its heartbeat is marked down after its
	// TTL (min_heartbeat_ttl, 10 s) and heartbeat_grace (10 s): about 20 s.
	nomadTTL   = 10 * time.Second
	nomadGrace = 10 * time.Second
)

// renderDeath adds the node death table and reads it against the
// published defaults.
func renderDeath(rep *bench.Report, rows []bench.Row) {
	rep.Heading("A node dies")
	tab := bench.Table{Title: "A node dies: until the cluster knows", Unit: "ms", Rows: rows,
		Note: "From the SIGKILL of every process of the node (its link down first) until a surviving node's `GET /v1/nodes` " +
			"shows it; each run the node comes back and the cluster is whole again before the next."}
	rep.Table(tab)
	k8s := k8sGrace + k8sToleration
	nomad := nomadTTL + nomadGrace
	down, lead := tab.Median(rowDown), tab.Median(rowLeader)
	rep.Para("Published defaults, quoted and not run here: Kubernetes marks a silent node NotReady after "+
		"`--node-monitor-grace-period` (40 s, 50 s in recent releases) and evicts its pods after their default 300 s "+
		"toleration of `node.kubernetes.io/unreachable`: about %s from the death to replacements being scheduled. Nomad "+
		"marks a client down when its heartbeat lapses, after `min_heartbeat_ttl` (10 s) and `heartbeat_grace` (10 s): "+
		"about %s.", fmtDur(k8s), fmtDur(nomad))
	if math.IsNaN(down) {
		return
	}
	rep.Para("Here a dead follower was listed down after %s at the median (p99 %s): the node's lease (%s) runs out and "+
		"every node's watch of the heartbeat keys sees it go: %s the time of Nomad's default and %s that of Kubernetes' "+
		"NotReady grace alone (%s).",
		fmtMS(down), fmtMS(tab.Row(rowDown).Stats().P99), shcluster.DefaultTTL, bench.FormatRatio(down/ms(nomad)),
		bench.FormatRatio(down/ms(k8sGrace)), fmtDur(k8sGrace))
	if !math.IsNaN(lead) {
		rep.Para("A dead leader was replaced after %s at the median (p99 %s): its election key lives on a lease of the "+
			"same TTL, and once it expires the oldest remaining candidate leads.", fmtMS(lead), fmtMS(tab.Row(rowLeader).Stats().P99))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtMS(v float64) string { return bench.FormatValue(v) + " ms" }

func fmtDur(d time.Duration) string {
	if d >= time.Minute {
		return d.Truncate(time.Second).String()
	}
	return d.String()
}
