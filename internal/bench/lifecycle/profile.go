package lifecycle

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// profileMarkdown explains where `shoal run --rm` spends its time, step by
// step, from the CLI subjects, the daemon's runtime log and the in-process
// subjects of the same run.
func (r *report) profileMarkdown(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	total := r.Result(keyShoalRunNone)
	if !total.OK() {
		return
	}
	med := func(key string) time.Duration {
		if res := r.Result(key); res.OK() {
			return res.Summary(kit.PhaseTotal).Median
		}
		return 0
	}
	inner := func(key, name string) time.Duration { return medianOf(r.Inner[key][name]) }
	tRun := med(keyShoalRunNone)
	tVersion := med(keyShoalVersion)
	tAPI := med(keyShoalPs) - tVersion
	tBundle := inner(keyShoalRunNone, "created.bundle")
	tRunc := inner(keyShoalRunNone, "created.runtime")
	tDelete := inner(keyShoalRunNone, "deleted.total")
	tRuncDelete := inner(keyShoalRunNone, "deleted.runtime")
	// The delete of a --rm container runs after the exit status is sent:
	// not part of the end-to-end time, only of the CPU it shares.
	rest := tRun - tVersion - tAPI - tBundle - tRunc

	p("### Where `shoal run --rm` spends its time\n\n")
	p("Command: `%s`. Medians in ms, network none. The CLI steps come from the `shoal version` and "+
		"`shoal ps` subjects; the daemon steps from the runtime's own debug timings in the daemon's log "+
		"(both network modes); *rest* is what remains of the end-to-end median: waiting for `/bin/true` "+
		"to end, streaming its output, the network namespace from the pool, and request handling. "+
		"Medians do not add up exactly.\n\n", r.Command)
	p("| step | measured by | median |\n|---|---|---:|\n")
	p("| CLI process start-up and exit | `shoal version` | %s |\n", bench.FormatMS(tVersion))
	p("| one API round trip over the unix socket | `shoal ps` − `shoal version` | %s |\n", bench.FormatMS(tAPI))
	p("| daemon: bundle (overlay mount, config.json) | runtime log: created.bundle | %s |\n", bench.FormatMS(tBundle))
	p("| daemon: `runc run --detach` | runtime log: created.runtime | %s |\n", bench.FormatMS(tRunc))
	p("| daemon: delete after the reply, not in the total (runtime state %s, unmount, cgroups, bundle) | runtime log: deleted.total | %s |\n", bench.FormatMS(tRuncDelete), bench.FormatMS(tDelete))
	p("| rest | end to end − the above | %s |\n", bench.FormatMS(rest))
	p("| **total** | `shoal run --rm` | **%s** |\n", bench.FormatMS(tRun))
	p("| for comparison: bare `runc run` | `runc run` | %s |\n", bench.FormatMS(med(keyRuncRun)))
	p("| for comparison: the daemon's calls in-process | runtime API, Run | %s |\n\n", bench.FormatMS(med(keyAPIRun)))

	if tBare := med(keyRuncRun); tBare > 0 && tRunc > 0 {
		gap := tRun - tBare
		steps := []struct {
			name string
			d    time.Duration
		}{
			{"CLI start-up and exit", tVersion},
			{"`runc run --detach` in the daemon over bare `runc run` (which also waits and deletes)", tRunc - tBare},
			{"API round trip", tAPI},
			{"bundle", tBundle},
			{"rest", rest},
		}
		sort.SliceStable(steps, func(i, j int) bool { return steps[i].d > steps[j].d })
		var parts []string
		for _, st := range steps {
			parts = append(parts, fmt.Sprintf("%s %s ms", st.name, bench.FormatMS(st.d)))
		}
		p("`shoal run --rm` takes %s ms more than bare `runc run` (medians). Largest first: %s. "+
			"Reaching the %.2f× target means a median of %s ms.\n\n",
			bench.FormatMS(gap), strings.Join(parts, "; "), targetVsRunc, bench.FormatMS(time.Duration(float64(tBare)*targetVsRunc)))
	}

	p("Inside the runtime API's calls (in-process subjects), medians in ms:\n\n")
	p("| subject | bundle (overlay, config) | OCI runtime create or run | OCI runtime state removal | delete total |\n|---|---:|---:|---:|---:|\n")
	for _, k := range []string{keyAPISplitNone, keyAPISplitBridge, keyAPIRun} {
		res := r.Result(k)
		if !res.OK() {
			continue
		}
		p("| %s | %s | %s | %s | %s |\n", res.Name, bench.FormatMS(inner(k, "created.bundle")), bench.FormatMS(inner(k, "created.runtime")),
			bench.FormatMS(inner(k, "deleted.runtime")), bench.FormatMS(inner(k, "deleted.total")))
	}
	p("\n")
}
