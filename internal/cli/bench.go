package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/bench"
)

func init() { extraCommands = append(extraCommands, newBenchCmd) }

func benchSuiteNames() []string {
	var names []string
	for _, s := range bench.Suites() {
		names = append(names, s.Name)
	}
	return names
}

func newBenchCmd(*globals) *cobra.Command {
	var o bench.Options
	var out string
	cmd := &cobra.Command{
		Use:   "bench SUITE",
		Short: "Run a benchmark suite and regenerate docs/benchmarks.md",
		Long: `Run a benchmark suite beside its baselines, measured in one run, and write
its section (docs/bench/SUITE.md, SVG plots under docs/) and docs/benchmarks.md
with medians, p99, spread and ratios. Suites: ` + strings.Join(benchSuiteNames(), ", ") + `,
or all (every suite in that order; a suite that fails gets a section saying
why and the others still run). Suites start their own daemon on a temporary
data dir; they need root. BENCH_QUICK=1 (or --quick) runs every suite small.`,
		Example: `  shoal bench lifecycle
  BENCH_QUICK=1 shoal bench all --out docs`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var run []bench.Suite
			if args[0] == "all" {
				run = bench.Suites()
			} else if s, ok := bench.Lookup(args[0]); ok {
				run = []bench.Suite{s}
			} else {
				return usageErrorf("unknown suite %q: use one of %s or all", args[0], strings.Join(benchSuiteNames(), ", "))
			}
			if o.Runs < 0 {
				return usageErrorf("--runs %d: must not be negative", o.Runs)
			}
			if os.Getenv("BENCH_QUICK") == "1" {
				o.Quick = true
			}
			if os.Geteuid() != 0 {
				return fmt.Errorf("benchmarks start real containers: run as root")
			}
			if o.ShoalBin == "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				o.ShoalBin = exe
			}
			o.Out = cmd.ErrOrStderr()
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("--out %s: %w", out, err)
			}
			var errs []error
			for _, s := range run {
				so := o
				so.Command = "shoal bench " + s.Name
				if o.Runs > 0 {
					so.Command += fmt.Sprintf(" --runs %d", o.Runs)
				}
				if o.Quick {
					so.Command = "BENCH_QUICK=1 " + so.Command
				}
				rep, err := bench.RunSuite(cmd.Context(), s, so)
				if err != nil {
					errs = append(errs, fmt.Errorf("bench %s: %w", s.Name, err))
					fmt.Fprintf(cmd.ErrOrStderr(), "bench %s: %v\n", s.Name, err)
					if cmd.Context().Err() != nil {
						break
					}
					rep = bench.Failed(cmd.Context(), s, so, err)
				}
				if err := rep.WriteDocs(out); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: wrote %s/bench/%s.md (%s)\n", s.Name, out, s.Name, rep.Elapsed.Round(1e9))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/benchmarks.md\n", out)
			return errors.Join(errs...)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Runs, "runs", 0, "recorded runs per subject (default: each suite's own, fewer with --quick)")
	f.BoolVar(&o.Quick, "quick", false, "a short run of every suite (same as BENCH_QUICK=1)")
	f.StringVar(&out, "out", "docs", "folder of benchmarks.md and its charts")
	f.StringVar(&o.DataDir, "data-dir", "", "scratch folder for the suites (default: a new folder under /var/tmp, removed afterwards)")
	f.StringVar(&o.Examples, "examples", "", "folder of the example apps' binaries (default $SHOAL_EXAMPLES, then bin/examples beside this binary; built when missing)")
	return cmd
}

func init() { extraCommands = append(extraCommands, newBenchWorkerCmd) }

// newBenchWorkerCmd is the benchmarks' workload (bench.Worker), run on the
// host and inside containers from the same binary. It is hidden: people do
// not call it.
func newBenchWorkerCmd(*globals) *cobra.Command {
	return &cobra.Command{
		Use:                "bench-worker MODE [ARGS...]",
		Short:              "The benchmarks' workload (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return bench.Worker(args, cmd.OutOrStdout())
		},
	}
}
