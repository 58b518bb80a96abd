// Command shoal-bench is the benchmark harness behind `shoal bench` and
// `make bench`: it runs the suites of internal/bench beside their baselines
// and writes docs/benchmarks.md. It is a binary of its own so that the
// shipped shoal binary carries none of it; `shoal bench ...` runs the
// shoal-bench found next to the shoal executable.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/errdefs"

	// The suites register themselves with bench.
	_ "github.com/shoal-run/shoal/internal/bench/cluster"
	_ "github.com/shoal-run/shoal/internal/bench/density"
	_ "github.com/shoal-run/shoal/internal/bench/fastcontainer"
	_ "github.com/shoal-run/shoal/internal/bench/host"
	_ "github.com/shoal-run/shoal/internal/bench/jobs"
	_ "github.com/shoal-run/shoal/internal/bench/lifecycle"
	_ "github.com/shoal-run/shoal/internal/bench/resilience"
	_ "github.com/shoal-run/shoal/internal/bench/selfscale"
	_ "github.com/shoal-run/shoal/internal/bench/serving"
	_ "github.com/shoal-run/shoal/internal/bench/stateful"
	_ "github.com/shoal-run/shoal/internal/bench/storage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is bad input from the user: exit code 2.
type usageError struct{ error }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// run runs the command with args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newCmd()
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "shoal bench:", err)
	var ue usageError
	if errors.As(err, &ue) || errdefs.IsInvalid(err) {
		return 2
	}
	return 1
}

func suiteNames() []string {
	var names []string
	for _, s := range bench.Suites() {
		names = append(names, s.Name)
	}
	return names
}

func newCmd() *cobra.Command {
	var o bench.Options
	var out string
	cmd := &cobra.Command{
		Use:   "shoal-bench SUITE",
		Short: "Run a benchmark suite and regenerate docs/benchmarks.md",
		Long: `Run a benchmark suite beside its baselines, measured in one run, and write
its section (docs/bench/SUITE.md, SVG plots under docs/) and docs/benchmarks.md
with medians, p99, spread and ratios. Suites: ` + strings.Join(suiteNames(), ", ") + `,
or all (every suite in that order; a suite that fails gets a section saying
why and the others still run). Suites start their own daemon on a temporary
data dir; they need root. BENCH_QUICK=1 (or --quick) runs every suite small.

This is the shoal-bench binary; "shoal bench ..." runs it from next to the
shoal executable, and measures that shoal.`,
		Example: `  shoal bench lifecycle
  BENCH_QUICK=1 shoal bench all --out docs
  bin/shoal-bench --shoal bin/shoal serving`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("a suite is required (one of %s or all), got %d arguments\nRun 'shoal bench --help' for usage", strings.Join(suiteNames(), ", "), len(args))
			}
			var run []bench.Suite
			if args[0] == "all" {
				run = bench.Suites()
			} else if s, ok := bench.Lookup(args[0]); ok {
				run = []bench.Suite{s}
			} else {
				return usageErrorf("unknown suite %q: use one of %s or all", args[0], strings.Join(suiteNames(), ", "))
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
			shoal, err := shoalBinary(o.ShoalBin)
			if err != nil {
				return err
			}
			o.ShoalBin = shoal
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
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErrorf("%w\nRun 'shoal bench --help' for usage", err)
	})
	f := cmd.Flags()
	f.IntVar(&o.Runs, "runs", 0, "recorded runs per subject (default: each suite's own, fewer with --quick)")
	f.BoolVar(&o.Quick, "quick", false, "a short run of every suite (same as BENCH_QUICK=1)")
	f.StringVar(&out, "out", "docs", "folder of benchmarks.md and its charts")
	f.StringVar(&o.DataDir, "data-dir", "", "scratch folder for the suites (default: a new folder under /var/tmp, removed afterwards)")
	f.StringVar(&o.Examples, "examples", "", "folder of the example apps' binaries (default $SHOAL_EXAMPLES, then bin/examples beside the shoal binary; built when missing)")
	f.StringVar(&o.ShoalBin, "shoal", "", "the shoal binary to measure (default: shoal next to this binary)")
	return cmd
}

// shoalBinary returns the shoal binary to measure: flag when set, else
// shoal next to this executable.
func shoalBinary(flag string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", usageErrorf("--shoal: %w", err)
		}
		return filepath.Abs(flag)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the shoal binary: %w", err)
	}
	p := filepath.Join(filepath.Dir(exe), "shoal")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no shoal binary next to %s (%w): pass --shoal PATH", exe, err)
	}
	return p, nil
}
