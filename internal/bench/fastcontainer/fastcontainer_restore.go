package fastcontainer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// The paper's experiment 2: a Rails app's cold start against its restore
// from a CRIU image taken right after its start-up.
const (
	paperCold     = 2900.0 // ms
	paperRestored = 1200.0 // ms
)

// slowApp is a slow-booting app measured cold, restored and thawed.
type slowApp struct {
	name     string // row prefix and app name prefix
	manifest string // the app's manifest but its name and [scale]
	marker   string // what its page's answer starts with
}

// slowApps: the slowboot example (a Go program that listens after
// BOOT_DELAY) and a Django project from Debian's python3-django that
// loads its apps and migrates a new SQLite database at every boot
// (scripts/debian-images.sh django).
func slowApps(django string) []slowApp {
	return []slowApp{
		{name: "slowboot", marker: "slowboot from ",
			manifest: "image = \"slowboot:1\"\nport = 8080\n[resources]\ncpu = 0.5\nmemory = \"64Mi\"\n[health]\nhttp = \"/healthz\"\n[env]\nBOOT_DELAY = \"1.5s\"\n"},
		{name: "django", marker: "hello from django ",
			manifest: fmt.Sprintf("image = %q\nport = 8080\n[resources]\ncpu = 1\nmemory = \"256Mi\"\n[health]\nhttp = \"/healthz\"\n", django)},
	}
}

// Row names of the restore table, after the app's name.
const (
	rsCold     = "cold start"
	rsRestored = "restored from the checkpoint tier"
	rsThawed   = "thawed from the frozen tier"
	rsWarm     = "warm request"
)

const tRestore = "Experiment 2: cold start, restore and thaw to first byte"

// restoreScale is the [scale] of an app measured from a tier: idle
// replicas are frozen after 200 ms, and checkpointed (checkpoint = true)
// or kept frozen.
func restoreScale(min int, checkpoint bool, freeze string) string {
	return fmt.Sprintf("[scale]\nmin = %d\nmax = 1\nidle_timeout = \"200ms\"\nfreeze_timeout = %q\ncheckpoint = %t\n", min, freeze, checkpoint)
}

// withScale puts a [scale] table into manifest, before its first table.
func withScale(manifest, scale string) string {
	i := strings.Index(manifest, "\n[")
	return manifest[:i+1] + scale + manifest[i+1:]
}

// restores measures, in interleaved rounds, the first byte of a request
// to each slow app: cold (a fresh app, its replica booting), restored
// from its checkpoint (its replica frozen, dumped to disk and gone),
// thawed (its replica frozen) and warm (a ready replica).
func (e *env) restores(ctx context.Context, rep *bench.Report) error {
	django, err := e.DebianImage(ctx, "django")
	if err != nil {
		return err
	}
	apps := slowApps(django)
	var subjects []bench.Subject
	seq := 0
	get := func(app string) string {
		return fmt.Sprintf("GET http://%s/ (Host: %s.localhost)", e.Proxy, app)
	}
	ask := func(ctx context.Context, a slowApp, app string) (float64, error) {
		first, _, body, err := e.Request(ctx, app, "/")
		if err != nil {
			e.Fail("experiment 2", 1)
			return 0, err
		}
		if !strings.HasPrefix(body, a.marker) {
			return 0, fmt.Errorf("app %s answered %q, not its page", app, body)
		}
		return bench.Millis(first)[0], nil
	}
	for _, a := range apps {
		ck, thaw, warm := a.name+"-ck-1", a.name+"-thaw", a.name+"-warm"
		for app, scale := range map[string]string{
			ck:   restoreScale(0, true, "300ms"),
			thaw: restoreScale(0, false, "1h"),
			warm: restoreScale(1, false, "1h"),
		} {
			if err := e.Deploy(ctx, app, withScale(a.manifest, scale)); err != nil {
				return err
			}
		}
		cold := func(ctx context.Context, _ int) (float64, error) {
			seq++
			app := fmt.Sprintf("%s-cold-%d", a.name, seq)
			if err := e.Deploy(ctx, app, withScale(a.manifest, restoreScale(0, false, "1h"))); err != nil {
				return 0, err
			}
			defer e.Remove(context.WithoutCancel(ctx), app)
			return ask(ctx, a, app)
		}
		restored := func(ctx context.Context, _ int) (float64, error) {
			if err := e.checkpointed(ctx, ck); err != nil {
				return 0, err
			}
			t0 := time.Now()
			v, err := ask(ctx, a, ck)
			if err != nil {
				return 0, err
			}
			if err := e.wasRestored(ctx, ck, t0); err != nil {
				return 0, err
			}
			return v, nil
		}
		thawed := func(ctx context.Context, _ int) (float64, error) {
			a2, err := e.Status(ctx, thaw)
			if err != nil {
				return 0, err
			}
			if kit.CountState(a2, "frozen") == 0 {
				if kit.CountState(a2, "ready") == 0 {
					if _, err := ask(ctx, a, thaw); err != nil {
						return 0, err
					}
				}
				if err := e.WaitFor(ctx, thaw, time.Minute, "frozen", func(a types.App) bool {
					return kit.CountState(a, "frozen") == 1 && a.Ready == 0
				}); err != nil {
					return 0, err
				}
			}
			return ask(ctx, a, thaw)
		}
		warmed := func(ctx context.Context, _ int) (float64, error) {
			if err := e.WaitFor(ctx, warm, 2*time.Minute, "ready", func(a types.App) bool { return a.Ready >= 1 }); err != nil {
				return 0, err
			}
			return ask(ctx, a, warm)
		}
		subjects = append(subjects,
			bench.Subject{Name: a.name + ", " + rsCold, Command: "shoal app deploy (" + a.name + ", min 0); " + get(a.name+"-cold-N"), Run: cold},
			bench.Subject{Name: a.name + ", " + rsRestored, Command: "wait for its checkpoint event and no replica; " + get(ck), Run: restored},
			bench.Subject{Name: a.name + ", " + rsThawed, Command: "wait for state frozen; " + get(thaw), Run: thawed},
			bench.Subject{Name: a.name + ", " + rsWarm, Command: get(warm), Run: warmed})
	}
	warmup := 1
	if e.Opts.Quick {
		warmup = 0
	}
	rows, err := bench.Measure(ctx, e.Opts, warmup, e.Opts.RunsOr(15, 1), subjects)
	if err != nil {
		return err
	}
	for i := range rows {
		rows[i].Baseline = rows[i-i%4].Name // the same app's cold start
	}
	tab := bench.Table{Title: tRestore, Unit: "ms", Baseline: rows[0].Name, Rows: rows,
		Note: "Time from sending a request through the proxy to the first byte of the page's answer, rounds interleaved. " +
			"A cold start deploys a fresh app with `min = 0` (untimed; its start may use the app's premade sandbox if it is " +
			"ready) and times its first request: the replica boots. A restore goes to an app with `checkpoint = true`, " +
			"`idle_timeout = \"200ms\"` and `freeze_timeout = \"300ms\"` once its replica was frozen, dumped to disk with CRIU and " +
			"is gone (its checkpoint event, untimed); the request restores it (checked in its events). A thaw goes to an app " +
			"whose replica is frozen (`freeze_timeout = \"1h\"`); a warm request to one with a ready replica. The ratio column " +
			"divides by the same app's cold start."}
	rep.Table(tab)
	for _, a := range apps {
		c, r, f, w := tab.Row(a.name+", "+rsCold), tab.Row(a.name+", "+rsRestored), tab.Row(a.name+", "+rsThawed), tab.Row(a.name+", "+rsWarm)
		if !c.OK() || !r.OK() || !f.OK() || !w.OK() {
			continue
		}
		cs, rs, fs, ws := c.Stats(), r.Stats(), f.Stats(), w.Stats()
		rep.Para("%s: cold %s ms (p99 %s), restored %s ms (p99 %s), %s of its cold start (target ≤ 0.2×: %s; the paper's Rails app: "+
			"%s ms cold, %s ms restored, %s); thawed %s ms (p99 %s), %s ms over a warm request's %s ms (target ≤ 2 ms: %s).",
			a.name, bench.FormatValue(cs.Median), bench.FormatValue(cs.P99), bench.FormatValue(rs.Median), bench.FormatValue(rs.P99),
			bench.FormatRatio(rs.Median/cs.Median), bench.Verdict(rs.Median/cs.Median, func(v float64) bool { return v <= 0.2 }),
			bench.FormatValue(paperCold), bench.FormatValue(paperRestored), bench.FormatRatio(paperRestored/paperCold),
			bench.FormatValue(fs.Median), bench.FormatValue(fs.P99), bench.FormatValue(fs.Median-ws.Median), bench.FormatValue(ws.Median),
			bench.Verdict(fs.Median-ws.Median, func(v float64) bool { return v <= 2 }))
	}
	e.restoreTimings(rep)
	for _, a := range apps {
		for _, app := range []string{a.name + "-ck-1", a.name + "-thaw", a.name + "-warm"} {
			if err := e.Remove(ctx, app); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkpointed waits until app has no replica and its last checkpoint
// event says its replica was checkpointed to disk; an app with no
// replica and no checkpoint is first asked for its page (a boot).
func (e *env) checkpointed(ctx context.Context, app string) error {
	for asked := false; ; asked = true {
		if err := e.WaitFor(ctx, app, 2*time.Minute, "no replica", func(a types.App) bool { return len(a.Replicas) == 0 }); err != nil {
			return err
		}
		var evs []types.Event
		if err := e.GetJSON(ctx, "/v1/events?app="+app, &evs); err != nil {
			return err
		}
		last := ""
		for _, ev := range evs {
			if ev.Kind == "checkpoint" {
				last = ev.Reason
			}
		}
		switch {
		case strings.Contains(last, "checkpointed to disk"):
			return nil
		case strings.Contains(last, "failed"):
			return fmt.Errorf("app %s: %s", app, last)
		case asked:
			return fmt.Errorf("app %s: its replica was stopped without a checkpoint", app)
		}
		if _, _, _, err := e.Request(ctx, app, "/"); err != nil {
			e.Fail("experiment 2", 1)
			return err
		}
	}
}

// wasRestored says whether app's replica was restored from its
// checkpoint since t0, from its checkpoint events.
func (e *env) wasRestored(ctx context.Context, app string, t0 time.Time) error {
	var evs []types.Event
	if err := e.GetJSON(ctx, "/v1/events?app="+app, &evs); err != nil {
		return err
	}
	why := "no checkpoint event"
	for _, ev := range evs {
		if ev.Kind == "checkpoint" && !ev.Time.Before(t0) {
			if strings.Contains(ev.Reason, "restored from the checkpoint") {
				return nil
			}
			why = ev.Reason
		}
	}
	return fmt.Errorf("app %s: its replica was not restored from its checkpoint: %s", app, why)
}

// restoreTimings says where the restores' time went, from the daemon's
// start timing lines of the -ck apps but their first start (a boot).
func (e *env) restoreTimings(rep *bench.Report) {
	for _, name := range []string{"slowboot", "django"} {
		tm, probes := e.Daemon.StartTimings(name+"-ck", false)
		if len(tm["start"]) < 2 || len(tm["woken"]) != len(tm["start"]) {
			continue
		}
		for k := range tm {
			tm[k] = tm[k][1:]
		}
		probes = probes[1:]
		ms := func(k string) string { return bench.FormatValue(bench.Millis(bench.Summarize(tm[k]).Median)[0]) }
		p := 0
		for _, n := range probes {
			p += n
		}
		ct := e.Daemon.RestoreTimings(name + "-ck")
		cms := func(k string) string { return bench.FormatValue(bench.Millis(bench.Summarize(ct[k]).Median)[0]) }
		rep.Para("Where %s's restores spent their time, from the daemon's `serving: start timing`, `replica start timing` and "+
			"`container created` debug lines (%d restores, medians): the request waited %s ms for the start to be decided; "+
			"the start took %s ms, of which the node's spec (image, user namespace) %s ms, the network namespace and its "+
			"policy %s ms, the log pipe %s ms and the container %s ms: its bundle (the writable layer seeded from the checkpoint, "+
			"the overlay, the spec) %s ms and `runc restore` (runc and CRIU) %s ms; its port took a connection %s ms later "+
			"(%.1f probes on average), and its route was published %s ms after that.", name, len(ct["container"]),
			ms("woken"), ms("start"), cms("spec"), cms("network"), cms("log"), cms("container"), cms("bundle"), cms("runtime"),
			ms("boot"), float64(p)/float64(len(probes)), ms("route"))
	}
}
