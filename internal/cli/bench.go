package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/bench/worker"
)

func init() { extraCommands = append(extraCommands, newBenchCmd) }

// benchBinary is the harness's file name, looked for next to shoal.
const benchBinary = "shoal-bench"

// newBenchCmd runs the benchmark harness, a binary of its own
// (cmd/shoal-bench) next to the shoal executable, so that shoal itself
// carries none of it. The harness measures the shoal that started it.
func newBenchCmd(*globals) *cobra.Command {
	return &cobra.Command{
		Use:   "bench SUITE [flags]",
		Short: "Run a benchmark suite and regenerate docs/benchmarks.md",
		Long: `Run a benchmark suite beside its baselines and write docs/benchmarks.md.

The harness is the shoal-bench binary, which must lie next to this shoal
executable: "make build" puts both in bin/; copy shoal-bench beside an
installed shoal to benchmark it. With shoal-bench there, "shoal bench --help"
lists the suites and their flags.`,
		Example: `  shoal bench lifecycle
  BENCH_QUICK=1 shoal bench all --out docs`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("bench: find this executable: %w", err)
			}
			if real, err := filepath.EvalSymlinks(exe); err == nil {
				exe = real
			}
			harness, err := findBenchBinary(exe)
			if err != nil {
				if wantsHelp(args) {
					_ = cmd.Help()
					fmt.Fprintf(cmd.ErrOrStderr(), "\n%v\n", err)
					return nil
				}
				return err
			}
			argv := append([]string{harness, "--shoal", exe}, args...)
			if err := syscall.Exec(harness, argv, os.Environ()); err != nil {
				return fmt.Errorf("bench: run %s: %w", harness, err)
			}
			return nil
		},
	}
}

// findBenchBinary returns the shoal-bench next to the shoal executable exe,
// or an error that says where it was looked for and how to get it.
func findBenchBinary(exe string) (string, error) {
	p := filepath.Join(filepath.Dir(exe), benchBinary)
	fi, err := os.Stat(p)
	if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p, nil
	}
	why := "missing"
	if err == nil {
		why = "not an executable file"
	} else if !errors.Is(err, fs.ErrNotExist) {
		why = err.Error()
	}
	return "", fmt.Errorf("bench: %s, the benchmark harness, is not next to %s (%s): build it with `make build` (bin/%s) and keep it beside shoal", p, exe, why, benchBinary)
}

// wantsHelp reports whether args ask for help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "help" {
			return true
		}
	}
	return false
}

func init() { extraCommands = append(extraCommands, newBenchWorkerCmd) }

// newBenchWorkerCmd is the benchmarks' workload (worker.Run), run on the
// host and inside containers from the same binary. It is hidden: people do
// not call it.
func newBenchWorkerCmd(*globals) *cobra.Command {
	return &cobra.Command{
		Use:                "bench-worker MODE [ARGS...]",
		Short:              "The benchmarks' workload (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return worker.Run(args, cmd.OutOrStdout())
		},
	}
}
