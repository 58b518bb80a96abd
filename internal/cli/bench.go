package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/bench"
)

func init() { extraCommands = append(extraCommands, newBenchCmd) }

// benchSuites are the suites `shoal bench` knows, in the order "all" runs them.
var benchSuites = []string{"lifecycle"}

func newBenchCmd(*globals) *cobra.Command {
	var o bench.LifecycleOptions
	var out string
	cmd := &cobra.Command{
		Use:   "bench SUITE",
		Short: "Run a benchmark suite and regenerate docs/benchmarks.md",
		Long: `Run a benchmark suite beside its baselines (bare runc, podman), measured in
one run, and write its section of docs/benchmarks.md with medians, p99 and
ratios. Suites: ` + strings.Join(benchSuites, ", ") + `, or all.
The suite starts its own daemon on a temporary data dir; it needs root.
BENCH_QUICK=1 (or --quick) runs every suite small.`,
		Example: `  shoal bench lifecycle
  BENCH_QUICK=1 shoal bench all --out docs`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			suite := args[0]
			if suite != "all" && !contains(benchSuites, suite) {
				return usageErrorf("unknown suite %q: use one of %s or all", suite, strings.Join(benchSuites, ", "))
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
			o.Command = "shoal bench " + strings.Join(args, " ")
			if o.Runs > 0 {
				o.Command += fmt.Sprintf(" --runs %d", o.Runs)
			}
			if o.Quick {
				o.Command = "BENCH_QUICK=1 " + o.Command
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("--out %s: %w", out, err)
			}
			rep, err := bench.Lifecycle(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench lifecycle: %w", err)
			}
			if err := rep.WriteDocs(out); err != nil {
				return err
			}
			vsRunc, vsPodman := rep.Ratios()
			fmt.Fprintf(cmd.OutOrStdout(), "lifecycle: shoal run / bare runc run = %s, shoal run / podman run = %s\nwrote %s/benchmarks.md\n",
				bench.FormatRatio(vsRunc), bench.FormatRatio(vsPodman), out)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Runs, "runs", 0, "recorded runs per subject (default 50, 5 with --quick)")
	f.BoolVar(&o.Quick, "quick", false, "a short run of every suite (same as BENCH_QUICK=1)")
	f.StringVar(&out, "out", "docs", "folder of benchmarks.md and its charts")
	f.StringVar(&o.DataDir, "data-dir", "", "scratch folder for the suite (default: a new folder under /var/tmp, removed afterwards)")
	return cmd
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
