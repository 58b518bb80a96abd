// Package bench is the benchmark harness behind `shoal bench` and `make bench`.
//
// # Suites
//
// A suite measures shoal beside named baselines in the same run (bare runc,
// podman, the bare host, ...), summarises the samples, and renders a
// Markdown section with plots. Suites register themselves from an init
// function in their own package:
//
//	func init() {
//		bench.Register(bench.Suite{Name: "jobs", Title: "Jobs: untrusted code to completion", Run: Jobs})
//	}
//
// `shoal bench NAME` runs one suite, `shoal bench all` (and `make bench`)
// every registered suite in SuiteOrder (lifecycle, serving, resilience, jobs,
// storage, host, cluster; others follow by name). Each suite owns one section file,
// docs/bench/<suite>.md, and its charts docs/<suite>-*.svg; WriteDocs
// regenerates docs/benchmarks.md from every section file, so suites can be
// rerun alone. A suite that fails gets a section saying why (Failed).
//
// # Writing a suite
//
// Run gets Options with defaults filled in (RunSuite does that): Quick for
// BENCH_QUICK=1, RunsOr(full, quick) for the number of recorded runs,
// ScratchDir for a folder to remove afterwards, ExampleBinary for the hello,
// slowboot and cpuburn apps, ShoalBin for the binary under test, Logf for
// progress. A suite must remove everything it made (containers, mounts,
// cgroups, namespaces, bridges), also on error, and keep its quick mode
// well under a minute: each suite's TestQuick (benchtest.Quick) runs it in
// quick mode in `make test`.
//
// Run builds a Report:
//
//	rep := NewReport(ctx, "jobs", "Jobs: ...", o)
//	rows, err := Measure(ctx, o, warmup, o.RunsOr(30, 3), []Subject{
//		{Name: "bare runc", Command: "runc run ...", Run: func(ctx context.Context, i int) (float64, error) {...}},
//		{Name: "shoal job", Command: "shoal job run ...", Run: ...},
//	})
//	tab := Table{Title: "Submit to result", Unit: "ms", Baseline: "bare runc", Rows: rows}
//	rep.Table(tab)
//	rep.Plot("jobs-latency.svg", "jobs latency", BarsOf("Submit to result, median ms", ...))
//	rep.Para("A shoal job takes %s the time of bare runc ...", FormatRatio(tab.Ratio("shoal job", "bare runc")))
//	return rep, nil
//
// Measure interleaves the subjects (A, B, C, A, B, C, ...) after warm-up
// runs so that drift on the host touches them alike; a Subject returns one
// value per run in the table's unit (Millis for durations, MB/s, requests/s
// with HigherIsBetter). A Table renders each Row as median, p99, spread
// (min–max), stddev and runs, plus the ratio of medians to its Baseline row;
// a Row with Err set renders as "not run: <reason>", which is how a suite
// states plainly what cannot be measured on this machine. Rows may also be
// filled by hand (Row{Values: ...}). Table.Median and Table.Ratio give the
// figures for paragraphs: text that interprets numbers is computed from
// them, never written by hand. BarChart, LineChart and BarsOf draw the SVG
// plots. The harness prints the section heading, the exact command, the date,
// the run time and the machine (Machine: CPU model, cores, memory, kernel,
// cgroup version, tool versions) above the suite's content.
//
// # The suites
//
// Each suite is a package of its own under internal/bench (lifecycle,
// serving, resilience, jobs, storage, host, cluster, selfscale,
// fastcontainer, density, stateful) that registers
// itself from an init function; what several suites share (a daemon of the
// binary under test, the runc and podman baselines, in-process runtime
// boxes) is in package kit, the workload they run in containers in package
// worker, and the quick run every suite's test makes in package benchtest.
// cmd/shoal-bench imports every suite. The harness is built into that
// binary, never into shoal: `shoal bench` runs the shoal-bench next to it.
package bench
