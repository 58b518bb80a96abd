// Package bench is the benchmark harness behind `shoal bench` and `make bench`.
//
// A suite measures shoal beside named baselines in the same run (bare runc,
// podman, ...), summarises the samples (median, p90, p99, min, max, standard
// deviation), and renders a Markdown section with plots for docs/benchmarks.md.
// Each suite owns one section file, docs/bench/<suite>.md; WriteDocs
// regenerates docs/benchmarks.md from all section files, so suites can be run
// and added independently.
//
// The lifecycle suite (Lifecycle) measures a container's life from creation to
// removal: `shoal run --rm` through the real CLI and daemon, the runtime API's
// phases in-process (create, start, exec, delete), bare `runc run` and its
// phases, and `podman run --rm` of the same root filesystem.
package bench
