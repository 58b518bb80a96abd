// Package selfscale is the selfscale benchmark suite: the time from an
// app's replicate call to a second ready replica, with a frozen replica to
// thaw and without, beside a plain cold start; and the selfscale example
// app under a load step.
package selfscale

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

func init() {
	bench.Register(bench.Suite{Name: "selfscale", Title: "App-driven scaling: the self API", Run: Selfscale})
}

// The selfscale suite's daemon network and cgroup parent.
var selfscaleNet = kit.DaemonNet{Bridge: "shoalbs0", Subnet: "10.186.0.0/16", CgroupParent: "/shoal-bench-selfscale"}

// env is the suite's daemon and apps, with the suite's own steps.
type env struct{ *kit.ServingEnv }

// Row names of the replicate table.
const (
	ssThaw  = "replicate, a frozen replica available"
	ssStart = "replicate, none frozen (cold start)"
	ssCold  = "cold start of a request (reference)"
)

// Selfscale runs the selfscale suite: the time from a replicate call to a
// second ready replica, with a frozen replica to thaw and without, beside
// a plain cold start; and the selfscale example under a load step.
func Selfscale(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("selfscale: the shoal binary under test is required")
	}
	rep := bench.NewReport(ctx, "selfscale", "App-driven scaling: the self API", o)
	dir, err := o.ScratchDir("selfscale")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	se, err := kit.NewServingEnv(ctx, o, dir, selfscaleNet, "hello", "selfscale")
	if err != nil {
		return nil, fmt.Errorf("selfscale: %w", err)
	}
	e := &env{se}
	defer func() {
		err := e.Close(context.WithoutCancel(ctx))
		kit.RemoveCgroups(selfscaleNet.CgroupParent)
		if err != nil && retErr == nil {
			retErr = fmt.Errorf("selfscale: %w", err)
		}
	}()
	rep.Para("Every figure comes from one run of the real `shoal daemon` (runc, an embedded store, replicas on its own bridge). " +
		"A self API call is made as a replica makes it: with the replica's `$SHOAL_TOKEN`, to its `$SHOAL_API_URL`, over a " +
		"connection opened inside the replica's network namespace (the harness reads both from the replica's environment).")
	if err := e.replicate(ctx, rep); err != nil {
		return rep, fmt.Errorf("selfscale: replicate: %w", err)
	}
	if err := e.selfscaleStep(ctx, rep); err != nil {
		return rep, fmt.Errorf("selfscale: load step: %w", err)
	}
	e.selfscaleSummary(rep)
	return rep, nil
}

// caller returns a self API caller for a ready replica of app, connected.
func (e *env) caller(ctx context.Context, app string) (*asReplica, error) {
	a, err := e.Status(ctx, app)
	if err != nil {
		return nil, err
	}
	for _, r := range a.Replicas {
		if r.State == "ready" {
			x, err := replicaCaller(r)
			if err != nil {
				return nil, err
			}
			return x, x.connect(ctx)
		}
	}
	return nil, fmt.Errorf("app %q has no ready replica", app)
}

// replicateResult is the answer of POST /v1/self/replicate.
type replicateResult struct {
	Replica struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"replica"`
	How string `json:"how"`
}

// replicate measures the time from a replicate call to its answer, which
// the daemon sends once the new replica is ready and routed: with a frozen
// replica to thaw, and with none (a cold start); beside it, a plain cold
// start of a request to an app with no replica.
func (e *env) replicate(ctx context.Context, rep *bench.Report) error {
	rep.Heading("From a replicate call to a second ready replica")
	const app = "hello:1"
	// thaw: min 1, and the extra replica freezes 300 ms after it went idle.
	if err := e.Deploy(ctx, "rep-thaw", "image = \""+app+"\"\n[scale]\nmin = 1\nmax = 2\nidle_timeout = \"300ms\"\nfreeze_timeout = \"1h\"\n[health]\nhttp = \"/healthz\"\n"); err != nil {
		return err
	}
	if err := e.Deploy(ctx, "rep-start", "image = \""+app+"\"\n[scale]\nmin = 1\nmax = 2\nidle_timeout = \"1h\"\n[health]\nhttp = \"/healthz\"\n"); err != nil {
		return err
	}
	for _, a := range []string{"rep-thaw", "rep-start"} {
		if err := e.WaitFor(ctx, a, 30*time.Second, "ready", func(a types.App) bool { return a.Ready == 1 }); err != nil {
			return err
		}
	}
	second := func(app, how string, prepare func(context.Context) error) func(context.Context, int) (float64, error) {
		return func(ctx context.Context, _ int) (float64, error) {
			if err := prepare(ctx); err != nil {
				return 0, err
			}
			x, err := e.caller(ctx, app)
			if err != nil {
				return 0, err
			}
			defer x.close()
			var res replicateResult
			d, code, err := x.callPaced(ctx, "POST", "/v1/self/replicate", "", &res)
			if err != nil {
				return 0, err
			}
			if code != http.StatusOK || res.Replica.State != "ready" || res.How != how {
				return 0, fmt.Errorf("replicate answered %d, %s %s, want 200 and %s", code, res.How, res.Replica.State, how)
			}
			if err := e.WaitFor(ctx, app, 10*time.Second, "at two ready replicas", func(a types.App) bool { return a.Ready == 2 }); err != nil {
				return 0, err
			}
			return bench.Millis(d)[0], nil
		}
	}
	// Before a thaw run: one ready replica and one frozen. The first time,
	// the second replica is made by an untimed replicate; it freezes once
	// the app asked for it idle_timeout ago.
	oneFrozen := func(ctx context.Context) error {
		if a, err := e.Status(ctx, "rep-thaw"); err == nil && len(a.Replicas) == 1 {
			x, err := e.caller(ctx, "rep-thaw")
			if err != nil {
				return err
			}
			_, _, err = x.callPaced(ctx, "POST", "/v1/self/replicate", "", nil)
			x.close()
			if err != nil {
				return err
			}
		}
		if err := e.WaitFor(ctx, "rep-thaw", 30*time.Second, "at one ready and one frozen replica", func(a types.App) bool {
			return a.Ready == 1 && kit.CountState(a, "frozen") == 1 && len(a.Replicas) == 2
		}); err != nil {
			return err
		}
		bench.Settle(ctx, bench.SettleIdle, bench.SettleWindow, bench.SettleMax)
		return nil
	}
	// Before a cold run: one ready replica only (the other asked to die).
	oneOnly := func(ctx context.Context) error {
		a, err := e.Status(ctx, "rep-start")
		if err != nil {
			return err
		}
		for _, r := range a.Replicas {
			if r.State == "ready" && len(a.Replicas) > 1 {
				x, err := replicaCaller(r)
				if err != nil {
					return err
				}
				_, _, err = x.callPaced(ctx, "POST", "/v1/self/die", "", nil)
				x.close()
				if err != nil {
					return err
				}
				break
			}
		}
		if err := e.WaitFor(ctx, "rep-start", 30*time.Second, "at one replica", func(a types.App) bool {
			return a.Ready == 1 && len(a.Replicas) == 1
		}); err != nil {
			return err
		}
		// The dead replica's namespace is released in the background
		// (iptables work); let the host settle first.
		bench.Settle(ctx, bench.SettleIdle, bench.SettleWindow, time.Second)
		return nil
	}
	seq := 0
	cold := func(ctx context.Context, _ int) (float64, error) {
		seq++
		name := fmt.Sprintf("rep-cold-%d", seq)
		if err := e.Deploy(ctx, name, "image = \""+app+"\"\n[scale]\nmin = 0\nmax = 1\n[health]\nhttp = \"/healthz\"\n"); err != nil {
			return 0, err
		}
		defer e.Remove(context.WithoutCancel(ctx), name)
		first, _, _, err := e.Request(ctx, name, "/")
		if err != nil {
			e.Fail("replicate", 1)
			return 0, err
		}
		return bench.Millis(first)[0], nil
	}
	call := "POST $SHOAL_API_URL/v1/self/replicate (as the app's ready replica)"
	rows, err := bench.Measure(ctx, e.Opts, 1, e.Opts.RunsOr(20, 3), []bench.Subject{
		{Name: ssThaw, Command: "wait for one ready and one frozen replica; " + call, Run: second("rep-thaw", "thawed", oneFrozen)},
		{Name: ssStart, Command: "wait for one replica (the other called die); " + call, Run: second("rep-start", "started", oneOnly)},
		{Name: ssCold, Command: fmt.Sprintf("shoal app deploy (hello, min 0); GET http://%s/ (Host: rep-cold-N.localhost), to the first byte", e.Proxy), Run: cold},
	})
	if err != nil {
		return err
	}
	tab := bench.Table{Title: "Replicate to a second ready replica", Unit: "ms", Baseline: ssCold, Rows: rows,
		Note: "hello with `min = 1`, `max = 2` and an HTTP health check. The time runs from sending the call to its answer, which the daemon sends " +
			"(a call the app's rate limit refuses is tried again a second later, as an app would, and only the answered one is timed) " +
			"once the new replica is ready and in the route table (a frozen one is thawed first, the most recently used; otherwise one is started and " +
			"probed every 2 ms). The connection to the self API is opened before the timed call. The reference row is a request to a fresh app with no replica, to its first byte."}
	rep.Table(tab)
	e.Tables = append(e.Tables, tab)
	for _, a := range []string{"rep-thaw", "rep-start"} {
		if err := e.Remove(ctx, a); err != nil {
			return err
		}
	}
	th, st := tab.Row(ssThaw), tab.Row(ssStart)
	if th.OK() && st.OK() {
		rep.Para("With a frozen replica, a replicate call has a second replica ready and routed in %s ms at the median and %s ms at p99 "+
			"(target ≤ 100 ms: %s); without one it is a cold start, %s ms at the median (%s ms for a request that wakes an app with no replica; "+
			"target: no slower than a cold start, within 10 %% or 5 ms of it: %s; %s the cold start).",
			bench.FormatValue(th.Stats().Median), bench.FormatValue(th.Stats().P99), bench.Verdict(th.Stats().P99, func(v float64) bool { return v <= 100 }),
			bench.FormatValue(st.Stats().Median), bench.FormatValue(tab.Median(ssCold)),
			bench.Verdict(st.Stats().Median-tab.Median(ssCold), func(v float64) bool { return v <= math.Max(5, 0.1*tab.Median(ssCold)) }),
			bench.FormatRatio(st.Stats().Median/tab.Median(ssCold)))
	}
	return nil
}
