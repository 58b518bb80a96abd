package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
)

// Rows of the hop table.
const (
	rowLocal = "GET / through the proxy of the replica's node (baseline)"
	rowHop   = "GET / through another node's proxy, one hop to the replica's node"
)

// hopRequests is how many requests one run of a hop subject sends, one
// after another; its value is their median.
const hopRequests = 200

// measureHop deploys one hello replica pinned to a follower and times GET /
// through that node's proxy and through another node's, which forwards it
// to the first.
func (e *env) measureHop(ctx context.Context, dir string) ([]bench.Row, error) {
	_, followers, err := e.roles(ctx)
	if err != nil {
		return nil, err
	}
	home, other := followers[0], followers[1]
	const app = "hop"
	if err := e.deploy(ctx, dir, app, fmt.Sprintf("image = \"hello:1\"\nport = 8080\n[scale]\nmin = 1\nmax = 1\n[health]\nhttp = \"/healthz\"\n[placement]\nnodes = [%q]\n", home.Name)); err != nil {
		return nil, err
	}
	defer e.remove(context.WithoutCancel(ctx), app)
	a, err := e.waitApp(ctx, app, 90*time.Second, "ready on "+home.Name, func(a types.App) bool { return len(readyOn(a)[home.Name]) == 1 })
	if err != nil {
		return nil, err
	}
	replica := readyOn(a)[home.Name][0].ID
	c := clustertest.ProxyClient()
	defer c.CloseIdleConnections()
	run := func(via *clustertest.Node) func(context.Context, int) (float64, error) {
		return func(ctx context.Context, _ int) (float64, error) {
			var took []time.Duration
			for range hopRequests {
				name, d, err := clustertest.Get(ctx, c, via.Proxy(), app)
				if err != nil {
					return 0, fmt.Errorf("GET / through %s: %w", via.Name, err)
				}
				if name != replica {
					return 0, fmt.Errorf("GET / through %s answered by %q, want %s on %s", via.Name, name, replica, home.Name)
				}
				took = append(took, d)
			}
			return bench.Stats(bench.Millis(took...)).Median, nil
		}
	}
	// The other node learns the route through the store: wait until it
	// serves the app.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, err := clustertest.Get(ctx, c, other.Proxy(), app); err == nil {
			break
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("app %q not served through %s's proxy after 30s: %w", app, other.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return bench.Measure(ctx, e.o, 1, e.o.RunsOr(10, 2), []bench.Subject{
		{Name: rowLocal, Command: fmt.Sprintf("%d × GET / (Host: hop.localhost) on <node's ip>:8080, keep-alive; the run's median", hopRequests), Run: run(home)},
		{Name: rowHop, Command: fmt.Sprintf("%d × GET / (Host: hop.localhost) on <other node's ip>:8080, keep-alive; the run's median", hopRequests), Run: run(other)},
	})
}

// renderHop adds the hop table and its ratio.
func renderHop(rep *bench.Report, rows []bench.Row) {
	tab := bench.Table{Title: "Through a proxy hop to another node", Unit: "ms", Baseline: rowLocal, Rows: rows,
		Note: "One hello replica, pinned to a follower with `[placement] nodes`; the client on the host sends one request after " +
			"another through the proxy of that node, or through another node's proxy, which forwards it to the first with its " +
			"authenticated hop header. A run's value is the median of its requests."}
	rep.Table(tab)
	if r := tab.Ratio(rowHop, rowLocal); r == r {
		rep.Para("A hop through a second node's proxy took %s the time of going to the replica's own node at the median "+
			"(%s against %s per request).%s", bench.FormatRatio(r), fmtMS(tab.Median(rowHop)), fmtMS(tab.Median(rowLocal)),
			tab.Overlap(rowHop, rowLocal))
	}
}
