package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Suite is one benchmark suite: a name for the command line
// (`shoal bench NAME`), a title for its section, and the function that runs
// it and returns its report.
type Suite struct {
	Name  string
	Title string
	Run   func(ctx context.Context, o Options) (*Report, error)
}

// SuiteOrder is the order of the known suites, both in `shoal bench all`
// and in docs/benchmarks.md; other registered suites follow in name order.
var SuiteOrder = []string{"lifecycle", "serving", "resilience", "jobs", "storage", "host", "cluster"}

var (
	suitesMu sync.Mutex
	suites   = map[string]Suite{}
)

// Register adds a suite; call it from an init function. It panics on an
// empty or duplicate name, or a nil Run: both are programming errors.
func Register(s Suite) {
	suitesMu.Lock()
	defer suitesMu.Unlock()
	if !plainName(s.Name) || s.Run == nil {
		panic(fmt.Sprintf("bench: Register(%q): needs a plain name and a Run function", s.Name))
	}
	if _, dup := suites[s.Name]; dup {
		panic(fmt.Sprintf("bench: Register(%q): registered twice", s.Name))
	}
	suites[s.Name] = s
}

// Suites returns every registered suite in SuiteOrder, then the others by
// name.
func Suites() []Suite {
	suitesMu.Lock()
	defer suitesMu.Unlock()
	out := make([]Suite, 0, len(suites))
	for _, s := range suites {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return lessSuite(out[i].Name, out[j].Name) })
	return out
}

// Lookup returns the registered suite called name.
func Lookup(name string) (Suite, bool) {
	suitesMu.Lock()
	defer suitesMu.Unlock()
	s, ok := suites[name]
	return s, ok
}

// lessSuite orders suite names: SuiteOrder first, then by name.
func lessSuite(a, b string) bool {
	rank := func(s string) int {
		for i, n := range SuiteOrder {
			if n == s {
				return i
			}
		}
		return len(SuiteOrder)
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra < rb
	}
	return a < b
}

func plainName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/\\ ") && !strings.HasPrefix(s, ".")
}

// Options are what every suite gets from `shoal bench` (or a test).
type Options struct {
	// Runs is the number of recorded runs per subject; 0 means the suite's
	// default (see RunsOr).
	Runs int
	// Quick makes a short run (BENCH_QUICK=1): few runs, small inputs. A
	// suite in quick mode should finish in well under a minute.
	Quick bool
	// ShoalBin is the shoal binary whose CLI and daemon are measured
	// (default: this executable when it is named shoal).
	ShoalBin string
	// Examples is the folder of the example apps' binaries, laid out as
	// `make examples` leaves them (NAME/NAME); default $SHOAL_EXAMPLES, then
	// bin/examples next to ShoalBin. ExampleBinary builds what is missing.
	Examples string
	// DataDir is where a suite makes its scratch folder, removed afterwards
	// (default /var/tmp).
	DataDir string
	// Out receives progress lines (default: discarded).
	Out io.Writer
	// Command is how the suite was invoked, shown above every table
	// (default "shoal bench NAME", with BENCH_QUICK=1 and --runs when set).
	Command string
}

// LifecycleOptions configure the lifecycle suite.
type LifecycleOptions = Options

// RunsOr returns o.Runs when it is set, else quick in quick mode and full
// otherwise.
func (o Options) RunsOr(full, quick int) int {
	switch {
	case o.Runs > 0:
		return o.Runs
	case o.Quick:
		return quick
	default:
		return full
	}
}

// Logf writes a progress line to o.Out.
func (o Options) Logf(format string, a ...any) {
	if o.Out != nil {
		fmt.Fprintf(o.Out, format+"\n", a...)
	}
}

// WithDefaults fills in what a suite may rely on: Out, DataDir, Command
// (for suite), and ShoalBin when this executable is shoal.
func (o Options) WithDefaults(suite string) (Options, error) {
	if o.Runs < 0 {
		return o, errdefs.Invalid("runs", "%d must not be negative", o.Runs)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.DataDir == "" {
		o.DataDir = "/var/tmp"
	}
	if o.ShoalBin == "" {
		if exe, err := os.Executable(); err == nil && filepath.Base(exe) == "shoal" {
			o.ShoalBin = exe
		}
	}
	if o.Examples == "" {
		o.Examples = os.Getenv("SHOAL_EXAMPLES")
	}
	if o.Examples == "" && o.ShoalBin != "" {
		o.Examples = filepath.Join(filepath.Dir(o.ShoalBin), "examples")
	}
	if o.Command == "" {
		o.Command = "shoal bench " + suite
		if o.Runs > 0 {
			o.Command += fmt.Sprintf(" --runs %d", o.Runs)
		}
		if o.Quick {
			o.Command = "BENCH_QUICK=1 " + o.Command
		}
	}
	return o, nil
}

// RunSuite runs s with o's defaults filled in and stamps the report with
// the suite's name, title, command and elapsed time.
func RunSuite(ctx context.Context, s Suite, o Options) (*Report, error) {
	o, err := o.WithDefaults(s.Name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	rep, err := s.Run(ctx, o)
	if rep != nil {
		if rep.Suite == "" {
			rep.Suite = s.Name
		}
		if rep.Title == "" {
			rep.Title = s.Title
		}
		rep.finish()
	}
	return rep, err
}

// ScratchDir makes a fresh folder for a suite under o.DataDir; the caller
// removes it.
func (o Options) ScratchDir(suite string) (string, error) {
	parent := o.DataDir
	if parent == "" {
		parent = "/var/tmp"
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("%s: data dir: %w", suite, err)
	}
	dir, err := os.MkdirTemp(parent, "shoal-bench-"+suite+"-")
	if err != nil {
		return "", fmt.Errorf("%s: data dir: %w", suite, err)
	}
	return dir, nil
}

// ExampleBinary returns the path of example app name (hello, slowboot,
// cpuburn): o.Examples/NAME/NAME when it exists, else it builds
// ./examples/NAME of the source tree that holds the working directory (or
// one of its parents) into scratch and returns that.
func (o Options) ExampleBinary(ctx context.Context, name, scratch string) (string, error) {
	if o.Examples != "" {
		p := filepath.Join(o.Examples, name, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	root, err := SourceTree()
	if err != nil {
		return "", fmt.Errorf("example %q: not in %q and %w", name, o.Examples, err)
	}
	out := filepath.Join(scratch, "examples", name, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./examples/"+name)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("example %q: go build: %w: %s", name, err, msg)
	}
	return out, nil
}

// SourceTree finds the shoal source tree from the working directory up.
func SourceTree() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if raw, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(raw), "module github.com/shoal-run/shoal") {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no shoal source tree above the working directory to build it from")
		}
		dir = up
	}
}
