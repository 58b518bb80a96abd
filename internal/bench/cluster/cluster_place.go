package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/placement"
)

// Rows of the placement table.
const (
	rowPlace3   = "placement.PickNode: 30 replicas of 10 apps over 3 nodes"
	rowPlace100 = "placement.PickNode: 3000 replicas of 300 apps over 100 nodes"
)

// placeWorkload is a cluster to fill: nodes of cpus CPUs and mem bytes, and
// apps apps of per replicas each, every replica asking 0.25 CPU and 256 MiB,
// each app kept apart from the next.
type placeWorkload struct {
	nodes, apps, per int
	cpus             float64
	mem              int64
}

// The workloads of the two rows: this suite's cluster, and a large one.
var (
	placeSmall = placeWorkload{nodes: 3, apps: 10, per: 3, cpus: 4, mem: 24 << 30}
	placeLarge = placeWorkload{nodes: 100, apps: 300, per: 10, cpus: 8, mem: 32 << 30}
)

// run places every replica of w, app after app in turns as a scale-out
// does, and returns the decisions per second. Each pick is recorded on its
// node before the next, as the leader's dispatcher records it.
func (w placeWorkload) run() (float64, error) {
	nodes := make([]placement.Node, w.nodes)
	for i := range nodes {
		nodes[i] = placement.Node{Slot: placement.Slot{Name: fmt.Sprintf("n%d", i+1), Apps: map[string]int{}},
			CPUs: w.cpus, Memory: w.mem}
	}
	names := make([]string, w.apps)
	rules := make([]placement.Rules, w.apps)
	for a := range names {
		names[a] = fmt.Sprintf("app%d", a)
	}
	for a := range names {
		rules[a] = placement.Rules{Apart: []string{names[(a+1)%w.apps]}}
	}
	ask := placement.Ask{CPU: 0.25, Memory: 256 << 20}
	t0 := time.Now()
	n := 0
	for r := 0; r < w.per; r++ {
		for a, app := range names {
			i, err := placement.PickNode(app, ask, nodes, placement.Affinity{}, rules[a])
			if err != nil {
				return 0, fmt.Errorf("replica %d of %s: %w", r, app, err)
			}
			nodes[i].Apps[app]++
			nodes[i].Placed.CPU += ask.CPU
			nodes[i].Placed.Memory += ask.Memory
			n++
		}
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// measurePlacement times the placer alone, in this process.
func measurePlacement(ctx context.Context, o bench.Options) ([]bench.Row, error) {
	subject := func(name string, w placeWorkload) bench.Subject {
		return bench.Subject{Name: name, Command: fmt.Sprintf("PickNode for each replica in turn, recorded on its node (%d nodes, %d apps × %d)", w.nodes, w.apps, w.per),
			Run: func(context.Context, int) (float64, error) {
				// Many passes of the small one, so that a run lasts long
				// enough to time.
				passes := max(1, 3000/(w.apps*w.per))
				var sum float64
				for range passes {
					v, err := w.run()
					if err != nil {
						return 0, err
					}
					sum += v
				}
				return sum / float64(passes), nil
			}}
	}
	return bench.Measure(ctx, o, 1, o.RunsOr(10, 2), []bench.Subject{subject(rowPlace3, placeSmall), subject(rowPlace100, placeLarge)})
}

// renderPlacement adds the placement table.
func renderPlacement(rep *bench.Report, rows []bench.Row) {
	tab := bench.Table{Title: "Placement across nodes", Unit: "decisions/s", HigherIsBetter: true, Rows: rows,
		Note: "The leader's placer alone (`placement.PickNode`: fit, `[placement]`, spread, apart/with rules), in this process: " +
			"every replica is placed in turn and recorded on its node before the next, each app kept apart from the next one; " +
			"each replica asks 0.25 CPU and 256 MiB. The value of a run is replicas placed over the time it took."}
	rep.Table(tab)
	if v := tab.Median(rowPlace100); v == v {
		rep.Para("Placing one replica over 100 nodes that hold up to 3000 replicas took %s µs at the median.", bench.FormatValue(1e6/v))
	}
}
