// Package bench is the benchmark harness behind `shoal bench` and `make bench`.
//
// # Suites
//
// A suite measures shoal beside named baselines in the same run (bare runc,
// podman, the bare host, ...), summarises the samples, and renders a
// Markdown section with plots. Suites register themselves from an init
// function in their own file of this package:
//
//	func init() {
//		Register(Suite{Name: "jobs", Title: "Jobs: untrusted code to completion", Run: Jobs})
//	}
//
// `shoal bench NAME` runs one suite, `shoal bench all` (and `make bench`)
// every registered suite in SuiteOrder (lifecycle, serving, jobs, storage,
// host; others follow by name). Each suite owns one section file,
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
// well under a minute: TestQuickSuites runs every registered suite in quick
// mode in `make test`.
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
// # The suites here
//
// The lifecycle suite (Lifecycle) measures a container's life from creation
// to removal: `shoal run --rm` through the real CLI and daemon, the runtime
// API's phases in-process (create, start, exec, delete), bare `runc run` and
// its phases, and `podman run --rm` of the same root filesystem; and the
// first HTTP response of the hello example app (shoal with network none and
// bridge, a bare process, bare runc, podman; crun where it works).
//
// The host suite (Host) runs the same workloads as a bare process and in a
// shoal container: xz of a generated corpus at 1 and 2 threads, memory copy
// bandwidth by block size, dd and sysbench fileio, TCP request-response and
// throughput over loopback and over the bridge, boot to ready; and says why
// no VM column is measured. The storage suite (Storage) compares overlay
// (shoal's default), a plain copy of the root file system and a bind volume:
// create time and small-file reads and writes from 10 to 100 000 files, and
// SQLite queries and table copies from ~150 kB to ~100 MB. Both run their
// workloads through package worker (`shoal bench-worker`), a copy of the
// static shoal binary inside the container, so both sides run the same code.
//
// The harness is built into the shoal-bench binary (cmd/shoal-bench), never
// into shoal: `shoal bench` runs the shoal-bench next to it.
package bench
