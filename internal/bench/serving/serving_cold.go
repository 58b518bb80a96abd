package serving

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Row names of the cold-start and thaw tables.
const (
	svColdHello    = "hello, cold start"
	svColdSlowboot = "slowboot, cold start"
	svPremadeHello = "hello, cold start from a premade replica"
	svBareHello    = "hello, the bare process's boot"
	svThawHello    = "hello, thaw from frozen"
	svThawSlowboot = "slowboot, thaw from frozen"
	svWarm         = "hello, warm request"
)

// coldAndThaw measures time to the first byte of an answer through the
// proxy: for an app with no replica (a cold start: a fresh app per run), for
// an app whose only replica is frozen (a thaw), and for an app with a ready
// replica (the warm baseline).
func (e *env) coldAndThaw(ctx context.Context, rep *bench.Report) error {
	rep.Heading("Cold start, thaw and a warm request")
	thawToml := func(image string) string {
		return fmt.Sprintf("image = %q\n[scale]\nmin = 0\nmax = 1\nidle_timeout = \"200ms\"\nfreeze_timeout = \"10m\"\n", image)
	}
	if err := e.Deploy(ctx, "hello-thaw", thawToml("hello:1")); err != nil {
		return err
	}
	if err := e.Deploy(ctx, "slowboot-thaw", thawToml("slowboot:1")); err != nil {
		return err
	}
	if err := e.Deploy(ctx, "hello-warm", "image = \"hello:1\"\n[scale]\nmin = 1\nmax = 1\nidle_timeout = \"10m\"\n"); err != nil {
		return err
	}
	if err := e.WaitFor(ctx, "hello-warm", 30*time.Second, "ready", func(a types.App) bool { return a.Ready >= 1 }); err != nil {
		return err
	}
	// The old path, measured beside the new: a daemon that keeps no
	// premade replica.
	old, err := kit.NewServingEnv(ctx, e.Opts, filepath.Join(e.Dir, "old"), servingOldNet, "hello", "slowboot")
	if err != nil {
		return fmt.Errorf("the daemon with --premade -1: %w", err)
	}
	defer old.Close(context.WithoutCancel(ctx))
	helloBin, err := e.Opts.ExampleBinary(ctx, "hello", e.Dir)
	if err != nil {
		return err
	}
	seq := 0
	cold := func(image string) func(context.Context, int) (float64, error) {
		return func(ctx context.Context, _ int) (float64, error) {
			seq++
			name := fmt.Sprintf("%s-cold-%d", image, seq)
			if err := old.Deploy(ctx, name, fmt.Sprintf("image = \"%s:1\"\n[scale]\nmin = 0\nmax = 1\n", image)); err != nil {
				return 0, err
			}
			defer old.Remove(context.WithoutCancel(ctx), name)
			first, _, _, err := old.Request(ctx, name, "/")
			if err != nil {
				e.Fail("cold start and thaw", 1)
				return 0, err
			}
			return bench.Millis(first)[0], nil
		}
	}
	thaw := func(app string) func(context.Context, int) (float64, error) {
		return func(ctx context.Context, _ int) (float64, error) {
			a, err := e.Status(ctx, app)
			if err != nil {
				return 0, err
			}
			if kit.CountState(a, "frozen") == 0 {
				if kit.CountState(a, "ready") == 0 {
					if _, _, _, err := e.Request(ctx, app, "/"); err != nil {
						e.Fail("cold start and thaw", 1)
						return 0, err
					}
				}
				if err := e.WaitFor(ctx, app, 20*time.Second, "frozen", func(a types.App) bool {
					return kit.CountState(a, "frozen") == 1 && a.Ready == 0
				}); err != nil {
					return 0, err
				}
			}
			first, _, _, err := e.Request(ctx, app, "/")
			if err != nil {
				e.Fail("cold start and thaw", 1)
				return 0, err
			}
			return bench.Millis(first)[0], nil
		}
	}
	premade := func(ctx context.Context, _ int) (float64, error) {
		seq++
		name := fmt.Sprintf("hello-premade-%d", seq)
		if err := e.Deploy(ctx, name, "image = \"hello:1\"\n[scale]\nmin = 0\nmax = 1\n"); err != nil {
			return 0, err
		}
		defer e.Remove(context.WithoutCancel(ctx), name)
		id, err := waitPremade(ctx, e.Daemon.RunDir(), name)
		if err != nil {
			return 0, err
		}
		first, _, body, err := e.Request(ctx, name, "/")
		if err != nil {
			e.Fail("cold start and thaw", 1)
			return 0, err
		}
		if !strings.Contains(body, " from "+id+" ") {
			return 0, fmt.Errorf("app %s: answered %q, not by its premade replica %s", name, body, id)
		}
		return bench.Millis(first)[0], nil
	}
	bare := func(ctx context.Context, _ int) (float64, error) {
		first, err := bareBoot(ctx, helloBin)
		if err != nil {
			return 0, err
		}
		return bench.Millis(first)[0], nil
	}
	warm := func(ctx context.Context, _ int) (float64, error) {
		first, _, _, err := e.Request(ctx, "hello-warm", "/")
		if err != nil {
			e.Fail("cold start and thaw", 1)
			return 0, err
		}
		return bench.Millis(first)[0], nil
	}
	get := func(app string) string {
		return fmt.Sprintf("GET http://%s/ (Host: %s.localhost)", e.Proxy, app)
	}
	rows, err := bench.Measure(ctx, e.Opts, 1, e.Opts.RunsOr(15, 3), []bench.Subject{
		{Name: svColdHello, Command: "shoal daemon --premade -1; shoal app deploy (hello, min 0); GET http://" + old.Proxy + "/ (Host: hello-cold-N.localhost)", Run: cold("hello")},
		{Name: svPremadeHello, Command: "shoal app deploy (hello, min 0); wait for its premade replica; " + get("hello-premade-N"), Run: premade},
		{Name: svBareHello, Command: "PORT=P " + helloBin + " on the host; GET http://127.0.0.1:P/ until it answers", Run: bare},
		{Name: svColdSlowboot, Command: "shoal daemon --premade -1; shoal app deploy (slowboot, min 0); GET http://" + old.Proxy + "/ (Host: slowboot-cold-N.localhost)", Run: cold("slowboot")},
		{Name: svThawHello, Command: "wait for state frozen; " + get("hello-thaw"), Run: thaw("hello-thaw")},
		{Name: svThawSlowboot, Command: "wait for state frozen; " + get("slowboot-thaw"), Run: thaw("slowboot-thaw")},
		{Name: svWarm, Command: get("hello-warm"), Run: warm},
	})
	if err != nil {
		return err
	}
	coldTab := bench.Table{Title: "Cold start to first byte", Unit: "ms", Rows: rows[:4],
		Note: "Each run deploys a fresh app with `min = 0` (untimed), then times its first request from sending it to the first " +
			"byte of the answer: the proxy holds the request, the controller starts a replica, probes its port every 500 µs (a request waits), and routes it. " +
			"The plain cold starts run on a second daemon with `--premade -1` (no premade replicas: `runc run` on the start's path); " +
			"from a premade replica, the run waits (untimed) until the app's replica made ahead has shoal-init waiting as its pid 1, " +
			"and the start only hands it the entrypoint. The bare process is hello started on the host, timed from its exec to " +
			"the first byte of its answer to a GET polled every 0.2 ms."}
	thawTab := bench.Table{Title: "Thaw to first byte, beside a warm request", Unit: "ms", Baseline: svWarm, Rows: rows[4:],
		Note: "For a thaw, the app's only replica went idle for `idle_timeout = \"200ms\"` and was frozen (polled in its status) " +
			"before the timed request; a warm request goes to a ready replica over a kept-alive connection to the proxy."}
	rep.Table(coldTab)
	rep.Table(thawTab)
	e.Tables = append(e.Tables, coldTab, thawTab)
	rep.Plot("serving-first-byte.svg", "time to first byte: cold start, thaw, warm", bench.BarChart("Time to first byte, median ms",
		[]string{"hello", "slowboot"}, []string{"cold start", "thaw from frozen", "warm"},
		[][]float64{
			{coldTab.Median(svPremadeHello), thawTab.Median(svThawHello), thawTab.Median(svWarm)},
			{coldTab.Median(svColdSlowboot), thawTab.Median(svThawSlowboot), nan()},
		}))
	hc := coldTab.Row(svColdHello)
	if hc.OK() {
		s := hc.Stats()
		rep.Para("A cold start of hello takes %s ms to the first byte at the median and %s ms at p99 (targets: ≤ 100 ms and ≤ 250 ms: %s and %s). "+
			"slowboot needs %s ms, of which 1 500 ms is its own boot.",
			bench.FormatValue(s.Median), bench.FormatValue(s.P99), bench.Verdict(s.Median, func(v float64) bool { return v <= 100 }),
			bench.Verdict(s.P99, func(v float64) bool { return v <= 250 }), bench.FormatValue(coldTab.Median(svColdSlowboot)))
	}
	if pc := coldTab.Row(svPremadeHello); pc.OK() {
		s := pc.Stats()
		rep.Para("From a premade replica, hello's cold start takes %s ms to the first byte at the median and %s ms at p99 "+
			"(targets: ≤ 10 ms and ≤ 25 ms: %s and %s), against %s ms for the plain cold start and %s ms for the bare process's boot "+
			"(%s of it).", bench.FormatValue(s.Median), bench.FormatValue(s.P99),
			bench.Verdict(s.Median, func(v float64) bool { return v <= 10 }), bench.Verdict(s.P99, func(v float64) bool { return v <= 25 }),
			bench.FormatValue(coldTab.Median(svColdHello)), bench.FormatValue(coldTab.Median(svBareHello)),
			bench.FormatRatio(s.Median/coldTab.Median(svBareHello)))
	}
	if tm, probes := e.Daemon.StartTimings("hello-premade", true); len(tm["boot"]) > 0 {
		ms := func(k string) string { return bench.FormatValue(bench.Millis(bench.Summarize(tm[k]).Median)[0]) }
		sort.Ints(probes)
		rep.Para("Where a premade start's time goes, from the daemon's `serving: start timing` debug lines (%d starts, medians): "+
			"the request waited %s ms for the start to be decided, the entrypoint was handed to shoal-init in %s ms, "+
			"the app took %s ms to boot until its port took a connection (%d probes), and its route was published %s ms later; "+
			"the rest of the first byte is the proxy's wake-up call and its forward.", len(tm["boot"]), ms("woken"), ms("start"),
			ms("boot"), probes[len(probes)/2], ms("route"))
	}
	over := thawTab.Median(svThawHello) - thawTab.Median(svWarm)
	rep.Para("A thaw of hello costs %s ms over a warm request (target ≤ 5 ms: %s). slowboot from the frozen tier answers in %s ms "+
		"instead of the %s ms of its cold start (target ≤ 20 ms: %s), %s faster.",
		bench.FormatValue(over), bench.Verdict(over, func(v float64) bool { return v <= 5 }),
		bench.FormatValue(thawTab.Median(svThawSlowboot)), bench.FormatValue(coldTab.Median(svColdSlowboot)),
		bench.Verdict(thawTab.Median(svThawSlowboot), func(v float64) bool { return v <= 20 }),
		bench.FormatRatio(coldTab.Median(svColdSlowboot)/thawTab.Median(svThawSlowboot)))
	for _, app := range []string{"hello-thaw", "slowboot-thaw", "hello-warm"} {
		if err := e.Remove(ctx, app); err != nil {
			return err
		}
	}
	return nil
}
