package cluster

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
)

// Rows of the healing tables.
const (
	rowHeal             = "a follower holding 1 of 2 replicas dies → its replacement answers"
	rowHealDaemon       = "the daemon of a follower holding 1 of 2 replicas is SIGKILLed → its replacement answers"
	rowHealFailed       = "requests through the third node's proxy that failed, node powered off"
	rowHealDaemonFailed = "requests through the third node's proxy that failed, daemon SIGKILLed"
	rowLost             = "power-off → the leader finds the replica lost"
	rowStart            = "power-off → the leader starts its replacement"
	rowStartDaemon      = "daemon SIGKILL → the leader starts its replacement"
)

// Steady time of the load loop before the death and after the replacement
// answered.
const (
	healBefore = 300 * time.Millisecond
	healAfter  = 500 * time.Millisecond
)

// healRun is what one healing run saw besides its time.
type healRun struct {
	total, failed int
	first         string  // the first failure
	lost, start   float64 // ms from the power-off until the leader logged the replica lost, and its replacement's start
}

// healKind is one way a node holding a replica dies: its rows and how. A
// kind without a lost row may have its replica replaced before its node is
// lost (a health check refused by the dead daemon's node).
type healKind struct {
	row, failed, lost, start, command string
	kill                              func(*clustertest.Node) error
}

// healKinds: the machine dies (link down, every process SIGKILLed), or only
// its daemon does (SIGKILL; its link, proxy and replica live on).
var healKinds = []healKind{
	{row: rowHeal, failed: rowHealFailed, lost: rowLost, start: rowStart,
		command: "shoal app deploy (min = max = 2); load on the third node's proxy; power off a follower holding one; until a new replica answers there",
		kill:    (*clustertest.Node).PowerOff},
	{row: rowHealDaemon, failed: rowHealDaemonFailed, start: rowStartDaemon,
		command: "as above, but kill -KILL <the follower's daemon> only",
		kill:    func(nd *clustertest.Node) error { nd.Kill(); return nil }},
}

// healOnce deploys app with two replicas (spread: on two of the three
// nodes), puts the load loop on the proxy of the node that holds none,
// kills a follower that holds one as k says, and returns the milliseconds
// until a replacement answered through that proxy, with the loop's counts.
func (e *env) healOnce(ctx context.Context, dir, app string, k healKind) (float64, healRun, error) {
	if err := e.deploy(ctx, dir, app, "image = \"hello:1\"\nport = 8080\n[scale]\nmin = 2\nmax = 2\n[health]\nhttp = \"/healthz\"\n"); err != nil {
		return 0, healRun{}, err
	}
	defer e.remove(context.WithoutCancel(ctx), app)
	a, err := e.waitApp(ctx, app, 90*time.Second, "2 ready on 2 nodes", func(a types.App) bool {
		on := readyOn(a)
		return len(on) == 2 && len(a.Replicas) == 2
	})
	if err != nil {
		return 0, healRun{}, err
	}
	leader, _, err := e.roles(ctx)
	if err != nil {
		return 0, healRun{}, err
	}
	on := readyOn(a)
	var victim, front *clustertest.Node
	for _, nd := range e.c.Nodes {
		switch {
		case len(on[nd.Name]) == 0:
			front = nd
		case nd != leader && victim == nil:
			victim = nd
		}
	}
	if victim == nil || front == nil {
		return 0, healRun{}, fmt.Errorf("app %q: replicas on %v with %s leading: no follower holding one and node holding none", app, keys(on), leader.Name)
	}
	old := map[string]bool{}
	for _, r := range a.Replicas {
		old[r.ID] = true
	}
	l, err := clustertest.StartLoop(ctx, front, app)
	if err != nil {
		return 0, healRun{}, err
	}
	defer l.End()
	for id := range old {
		if _, err := l.WaitAnswer(ctx, 15*time.Second, "replica "+id+" through "+front.Name, func(r string) bool { return r == id }); err != nil {
			return 0, healRun{}, err
		}
	}
	time.Sleep(healBefore)
	t0 := time.Now()
	if err := k.kill(victim); err != nil {
		return 0, healRun{}, err
	}
	at, err := l.WaitAnswer(ctx, 60*time.Second, "a replacement through "+front.Name, func(r string) bool { return r != "" && !old[r] })
	if err == nil {
		time.Sleep(healAfter)
	}
	l.End()
	if perr := e.powerOn(ctx, victim); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return 0, healRun{}, err
	}
	total, failed, first := l.Counts()
	run := healRun{total: total, failed: failed, first: first}
	lost, start, err := leaderPhases(leader.Log, app, old)
	if err == nil && lost.IsZero() && k.lost != "" {
		err = fmt.Errorf("app %q: the leader's log has no lost replica", app)
	}
	if err != nil {
		return 0, healRun{}, err
	}
	run.lost, run.start = bench.Millis(lost.Sub(t0))[0], bench.Millis(start.Sub(t0))[0]
	return bench.Millis(at.Sub(t0))[0], run, nil
}

// measureHeal runs healOnce for each kind, interleaved, and returns the
// rows with what each recorded run saw besides its time, by row.
func (e *env) measureHeal(ctx context.Context, dir string) ([]bench.Row, map[string][]healRun, error) {
	side := map[string][]healRun{}
	warmup := 1
	if e.o.Quick {
		warmup = 0
	}
	var subjects []bench.Subject
	for _, k := range healKinds {
		subjects = append(subjects, bench.Subject{Name: k.row, Command: k.command, Run: func(ctx context.Context, i int) (float64, error) {
			v, r, err := e.healOnce(ctx, dir, fmt.Sprintf("heal-%d", i), k)
			if err == nil {
				side[k.row] = append(side[k.row], r)
			}
			return v, err
		}})
	}
	rows, err := bench.Measure(ctx, e.o, warmup, e.o.RunsOr(10, 2), subjects)
	for name, rs := range side {
		side[name] = rs[min(warmup, len(rs)):]
	}
	return rows, side, err
}

// renderHeal adds the healing tables: the time until a replacement answered,
// the share of requests that failed meanwhile, and the leader's steps.
func renderHeal(rep *bench.Report, rows []bench.Row, side map[string][]healRun) {
	tab := bench.Table{Title: "A node holding replicas dies: until they serve elsewhere", Unit: "ms", Rows: rows,
		Note: fmt.Sprintf("Each run deploys a fresh app of two hello replicas through the leader (spread puts them on two nodes), "+
			"sends a load loop (%d clients, %s between an answer and the next request, at most %s and %d requests, %s timeout) "+
			"through the proxy of the node that holds none, kills a follower that holds one, and times until a new replica "+
			"answers through that proxy; the node comes back and the app is removed before the next run. A power-off is the "+
			"machine dying: the node's peers get no answer at all. A SIGKILL of the daemon alone leaves its link, proxy and "+
			"replica up: calls to it are refused at once.",
			clustertest.LoopClients, clustertest.LoopPause, clustertest.LoopMaxTime, clustertest.LoopMaxTotal, clustertest.LoopTimeout)}
	rep.Table(tab)
	var failed, phases []bench.Row
	var firsts []string
	for _, k := range healKinds {
		f := bench.Row{Name: k.failed, Command: "the load loop above, from its start to " + healAfter.String() + " after the replacement answered"}
		lost := bench.Row{Name: k.lost, Command: "time= of the leader's log line msg=\"serving: lost\" of the replica"}
		start := bench.Row{Name: k.start, Command: "time= of the leader's next msg=\"serving: start\" of the app"}
		var total, nfail int
		first := ""
		for _, r := range side[k.row] {
			if first == "" {
				first = r.first
			}
			if r.total > 0 {
				f.Values = append(f.Values, 100*float64(r.failed)/float64(r.total))
				total += r.total
				nfail += r.failed
			}
			lost.Values = append(lost.Values, r.lost)
			start.Values = append(start.Values, r.start)
		}
		if w := tab.Row(k.row); !w.OK() {
			f.Err, lost.Err, start.Err = w.Err, w.Err, w.Err
		}
		failed = append(failed, f)
		if k.lost != "" {
			phases = append(phases, lost)
		}
		phases = append(phases, start)
		if len(side[k.row]) > 0 {
			msg := fmt.Sprintf("*%s*: of %d requests in %d runs, %d failed", k.row, total, len(side[k.row]), nfail)
			if first != "" {
				msg += "; the first failure: " + bench.OneLine(first)
			}
			firsts = append(firsts, msg+".")
		}
	}
	rep.Table(bench.Table{Title: "Failed requests while a node holding replicas dies", Unit: "% of requests", Rows: failed})
	ph := bench.Table{Title: "Where the time goes", Unit: "ms from the kill", Rows: phases,
		Note: "The same runs, read from the leader's log (same host clock, millisecond resolution)."}
	rep.Table(ph)
	for _, m := range firsts {
		rep.Para("%s", m)
	}
	med := tab.Median(rowHeal)
	if math.IsNaN(med) {
		return
	}
	rep.Para("A dead node's replica was replaced and answering through another node's proxy %s after the power-off at the median "+
		"(p99 %s), against about %s until Kubernetes' default eviction and about %s until Nomad's default marks the node down "+
		"(published, not run). The leader knew the replica lost after %s and started its replacement after %s (medians from "+
		"the power-off).", fmtMS(med), fmtMS(tab.Row(rowHeal).Stats().P99), fmtDur(k8sGrace+k8sToleration), fmtDur(nomadTTL+nomadGrace),
		fmtMS(ph.Median(rowLost)), fmtMS(ph.Median(rowStart)))
	if d := tab.Median(rowHealDaemon); !math.IsNaN(d) {
		rep.Para("With only the daemon killed, the replacement answered after %s (the leader started it after %s): %s the time "+
			"of a power-off.", fmtMS(d), fmtMS(ph.Median(rowStartDaemon)), bench.FormatRatio(d/med))
	}
}

// leaderPhases reads from the leader's log when it found app's replica lost
// (zero when it did not) and when it started a replica that is none of old
// (the replacement; the two lines may come in either order).
func leaderPhases(path, app string, old map[string]bool) (lost, start time.Time, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return lost, start, fmt.Errorf("leader log: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, " app="+app+" ") {
			continue
		}
		switch {
		case lost.IsZero() && strings.Contains(line, `msg="serving: lost"`):
			lost, err = logTime(line)
		case start.IsZero() && strings.Contains(line, `msg="serving: start"`) && !old[logField(line, "replica")]:
			start, err = logTime(line)
		}
		if err != nil {
			return lost, start, err
		}
	}
	if start.IsZero() {
		return lost, start, fmt.Errorf("app %q: the leader's log has no start of a replacement", app)
	}
	return lost, start, nil
}

// logField reads the value of key= in a daemon's log line (unquoted).
func logField(line, key string) string {
	_, v, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// logTime reads the time= field of a daemon's log line.
func logTime(line string) (time.Time, error) {
	f, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
	t, err := time.Parse(time.RFC3339Nano, f)
	if err != nil {
		return t, fmt.Errorf("log line %q: %w", bench.OneLine(line), err)
	}
	return t, nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
