package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const docsHeader = `# Benchmarks

This file is generated: ` + "`make bench`" + ` (or ` + "`shoal bench <suite>`" + `) regenerates it
from the section files in docs/bench/, one per suite, so a suite can be rerun
alone. Do not edit it by hand.

## How to read this

- Every table names the exact command that produced it, and every row the
  exact command or call it measured. Run the command on your own host to
  compare; numbers from different machines are not comparable.
- Each suite measures shoal beside a named baseline (bare runc, podman, ...)
  in the same run, interleaving the subjects so that noise on the host touches
  all of them alike. Compare the ratios more than the absolute numbers.
- Times are wall-clock milliseconds unless a table names another unit
  (MB/s, requests/s: higher is better). The median is the typical case; p99
  shows the tail (with few runs, p99 is close to the slowest run); spread is
  the lowest to the highest run and stddev the standard deviation. A ratio is
  shoal's median over the named baseline's median, both from the same run.
- A row that says "not run:" could not be measured on this machine; the
  reason is the error the harness met.
- ` + "`BENCH_QUICK=1`" + ` runs few samples: good to check that the harness works,
  not to quote.
- Each suite section lists the machine it ran on (CPU model, cores, memory,
  kernel, cgroup version, tool versions) and the exact command that produced
  it; every table repeats its command.
`

// WriteDocs writes a suite's section to docsDir/bench/<suite>.md and its
// charts next to benchmarks.md, then regenerates docsDir/benchmarks.md from
// every section file.
func WriteDocs(docsDir, suite, markdown string, charts map[string][]byte) error {
	if !plainName(suite) {
		return fmt.Errorf("docs: suite name %q is not a plain name", suite)
	}
	secDir := filepath.Join(docsDir, "bench")
	if err := os.MkdirAll(secDir, 0o755); err != nil {
		return fmt.Errorf("docs: %w", err)
	}
	for name, svg := range charts {
		if filepath.Base(name) != name || !strings.HasSuffix(name, ".svg") {
			return fmt.Errorf("docs: chart name %q is not a plain .svg name", name)
		}
		if err := writeAtomic(filepath.Join(docsDir, name), svg); err != nil {
			return err
		}
	}
	if err := writeAtomic(filepath.Join(secDir, suite+".md"), []byte(strings.TrimSpace(markdown)+"\n")); err != nil {
		return err
	}
	return RegenerateDocs(docsDir)
}

// RegenerateDocs rebuilds docsDir/benchmarks.md: the header, then every
// docsDir/bench/<suite>.md in suite order.
func RegenerateDocs(docsDir string) error {
	entries, err := os.ReadDir(filepath.Join(docsDir, "bench"))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("docs: %w", err)
	}
	var suites []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".md"); ok && !e.IsDir() {
			suites = append(suites, name)
		}
	}
	sort.Slice(suites, func(i, j int) bool { return lessSuite(suites[i], suites[j]) })
	var b strings.Builder
	b.WriteString(docsHeader)
	for _, s := range suites {
		sec, err := os.ReadFile(filepath.Join(docsDir, "bench", s+".md"))
		if err != nil {
			return fmt.Errorf("docs: section %s: %w", s, err)
		}
		b.WriteString("\n")
		b.Write(sec)
	}
	return writeAtomic(filepath.Join(docsDir, "benchmarks.md"), []byte(b.String()))
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("docs: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("docs: %w", err)
	}
	return nil
}
