package serving

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Row names of the cold-start and thaw tables.
const (
	svColdHello    = "hello, cold start"
	svColdSlowboot = "slowboot, cold start"
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
	seq := 0
	cold := func(image string) func(context.Context, int) (float64, error) {
		return func(ctx context.Context, _ int) (float64, error) {
			seq++
			name := fmt.Sprintf("%s-cold-%d", image, seq)
			if err := e.Deploy(ctx, name, fmt.Sprintf("image = \"%s:1\"\n[scale]\nmin = 0\nmax = 1\n", image)); err != nil {
				return 0, err
			}
			defer e.Remove(context.WithoutCancel(ctx), name)
			first, _, _, err := e.Request(ctx, name, "/")
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
		{Name: svColdHello, Command: "shoal app deploy (hello, min 0); " + get("hello-cold-N"), Run: cold("hello")},
		{Name: svColdSlowboot, Command: "shoal app deploy (slowboot, min 0); " + get("slowboot-cold-N"), Run: cold("slowboot")},
		{Name: svThawHello, Command: "wait for state frozen; " + get("hello-thaw"), Run: thaw("hello-thaw")},
		{Name: svThawSlowboot, Command: "wait for state frozen; " + get("slowboot-thaw"), Run: thaw("slowboot-thaw")},
		{Name: svWarm, Command: get("hello-warm"), Run: warm},
	})
	if err != nil {
		return err
	}
	coldTab := bench.Table{Title: "Cold start to first byte", Unit: "ms", Rows: rows[:2],
		Note: "Each run deploys a fresh app with `min = 0` (untimed), then times its first request from sending it to the first " +
			"byte of the answer: the proxy holds the request, the controller starts a replica, probes its port every 2 ms, and routes it."}
	thawTab := bench.Table{Title: "Thaw to first byte, beside a warm request", Unit: "ms", Baseline: svWarm, Rows: rows[2:],
		Note: "For a thaw, the app's only replica went idle for `idle_timeout = \"200ms\"` and was frozen (polled in its status) " +
			"before the timed request; a warm request goes to a ready replica over a kept-alive connection to the proxy."}
	rep.Table(coldTab)
	rep.Table(thawTab)
	e.Tables = append(e.Tables, coldTab, thawTab)
	rep.Plot("serving-first-byte.svg", "time to first byte: cold start, thaw, warm", bench.BarChart("Time to first byte, median ms",
		[]string{"hello", "slowboot"}, []string{"cold start", "thaw from frozen", "warm"},
		[][]float64{
			{coldTab.Median(svColdHello), thawTab.Median(svThawHello), thawTab.Median(svWarm)},
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
