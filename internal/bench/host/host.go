// Package host is the host benchmark suite: the same workloads as a bare
// process and in a shoal container (xz of a generated corpus at 1 and 2
// threads, memory copy bandwidth by block size, dd and sysbench fileio, TCP
// request-response and throughput over loopback and over the bridge, boot
// to ready), run through `shoal bench-worker` (package worker) on both
// sides; it says why no VM column is measured.
package host

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
	"github.com/shoal-run/shoal/internal/runtime"
)

func init() {
	bench.Register(bench.Suite{Name: "host", Title: "Host vs container: CPU, memory, disk, network, boot", Run: Host})
}

// The host suite's own bridge, subnet and cgroup parent.
const (
	hostBridge       = "shoalbh0"
	hostSubnet       = "10.184.0.0/16"
	hostCgroupParent = "/shoal-bench-host"
	hostRowHost      = "host"
	hostRowShoal     = "shoal container"
)

// hostEnv is what the host suite's measurements share.
type hostEnv struct {
	o      bench.Options
	dir    string
	k      *kit.Local
	layers []string
	shoal  string // the shoal binary on the host
	corpus string
}

// Host runs the host-vs-container suite: the same workloads (the shoal
// binary's bench-worker, xz, dd, sysbench, the hello app) as a bare process
// on the host and inside a shoal container (runc, overlay root, network
// bridge where there is networking), interleaved.
func Host(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("host: the shoal binary to run as the workload is required")
	}
	rep := bench.NewReport(ctx, "host", "Host vs container: CPU, memory, disk, network, boot", o)
	dir, err := o.ScratchDir("host")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := runtime.BecomeSubreaper(); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	e := &hostEnv{o: o, dir: dir, shoal: o.ShoalBin}
	rootfs := filepath.Join(dir, "rootfs")
	if err := kit.WorkerRootfs(ctx, rootfs, o.ShoalBin, "xz", "dd", "sysbench"); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	hello, err := o.ExampleBinary(ctx, "hello", dir)
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	if err := kit.CopyFileMode(hello, filepath.Join(rootfs, "hello"), 0o755); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	e.k, err = kit.NewLocal(ctx, filepath.Join(dir, "kit"), hostCgroupParent, hostBridge, hostSubnet)
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	defer func() {
		if err := e.k.Close(context.WithoutCancel(ctx)); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if e.layers, err = e.k.Image(ctx, rootfs, "shoal-bench/worker:1"); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	rep.Para("Every row runs the same program twice, interleaved: as a bare process on the host (*%s*) and inside a "+
		"shoal container (*%s*: runc, overlay root from a one-layer image holding busybox, this shoal binary, and the "+
		"host's own xz, dd and sysbench with their libraries, default seccomp allowlist and capabilities, no cgroup "+
		"limits). Where a program times itself (`shoal bench-worker ...`), container start-up is not in the figure. "+
		"Ratios are container over host: above 1× the container is slower for times, below 1× it is slower for rates.",
		hostRowHost, hostRowShoal)
	if err := e.cpu(ctx, rep); err != nil {
		return rep, err
	}
	if err := e.memory(ctx, rep); err != nil {
		return rep, err
	}
	if err := e.disk(ctx, rep); err != nil {
		return rep, err
	}
	if err := e.network(ctx, rep); err != nil {
		return rep, err
	}
	if err := e.boot(ctx, rep); err != nil {
		return rep, err
	}
	e.vm(rep)
	return rep, nil
}

// inContainer runs args in a fresh shoal container with extra mounts and
// returns its output.
func (e *hostEnv) inContainer(ctx context.Context, mounts []runtime.Mount, args ...string) (string, error) {
	return e.k.Run(ctx, runtime.Spec{Layers: e.layers, Args: args, Mounts: mounts})
}

// pair measures one workload on the host and in a container, interleaved;
// parse turns a run's output into the value.
func (e *hostEnv) pair(ctx context.Context, runs int, hostArgs, boxArgs []string, mounts []runtime.Mount, parse func(string) (float64, error)) ([]bench.Row, error) {
	subjects := []bench.Subject{
		{Name: hostRowHost, Command: e.show(strings.Join(append([]string{"shoal"}, hostArgs[1:]...), " ")), Run: func(ctx context.Context, _ int) (float64, error) {
			out, err := kit.HostRun(ctx, hostArgs[0], hostArgs[1:]...)
			if err != nil {
				return 0, err
			}
			return parse(out)
		}},
		{Name: hostRowShoal, Command: "in the container: " + strings.Join(boxArgs, " "), Run: func(ctx context.Context, _ int) (float64, error) {
			out, err := e.inContainer(ctx, mounts, boxArgs...)
			if err != nil {
				return 0, err
			}
			return parse(out)
		}},
	}
	return bench.Measure(ctx, e.o, 1, runs, subjects)
}

// show replaces the scratch folder in a command with DIR.
func (e *hostEnv) show(cmd string) string { return strings.ReplaceAll(cmd, e.dir, "DIR") }

func parseSeconds(out string) (float64, error) {
	d, err := kit.ParseNS(out)
	return d.Seconds(), err
}

func parseFloat(out string) (float64, error) {
	f := strings.Fields(out)
	if len(f) == 0 {
		return 0, fmt.Errorf("no output")
	}
	return strconv.ParseFloat(f[len(f)-1], 64)
}

// cpu compresses a generated text corpus with xz at 1 and 2 threads.
func (e *hostEnv) cpu(ctx context.Context, rep *bench.Report) error {
	size := int64(100 << 20)
	if e.o.Quick {
		size = 8 << 20
	}
	e.corpus = filepath.Join(e.dir, "corpus.txt")
	if err := writeCorpus(e.corpus, size); err != nil {
		return fmt.Errorf("host: corpus: %w", err)
	}
	mounts := []runtime.Mount{{Source: e.dir, Destination: "/data", ReadOnly: true}}
	rep.Heading("CPU: xz of a text corpus")
	var tables []bench.Table
	for _, threads := range []int{1, 2} {
		t := fmt.Sprintf("-T%d", threads)
		rows, err := e.pair(ctx, e.o.RunsOr(3, 2),
			[]string{e.shoal, "bench-worker", "time", "xz", t, "-1", "-c", e.corpus},
			[]string{"/shoal", "bench-worker", "time", "xz", t, "-1", "-c", "/data/corpus.txt"}, mounts, parseSeconds)
		if err != nil {
			return err
		}
		tab := bench.Table{Title: fmt.Sprintf("xz at %d thread(s)", threads), Unit: "s", Baseline: hostRowHost, Rows: rows,
			Note: fmt.Sprintf("`xz %s -1` of a %d MiB generated English-like text corpus (seeded, the same every run), output discarded; "+
				"in the container the corpus is a read-only bind mount (page cache shared with the host).", t, size>>20)}
		rep.Table(tab)
		tables = append(tables, tab)
	}
	r1, r2 := tables[0].Ratio(hostRowShoal, hostRowHost), tables[1].Ratio(hostRowShoal, hostRowHost)
	rep.Para("Compressing in the container takes %s (1 thread) and %s (2 threads) of the host's time. %s%s%s",
		bench.FormatRatio(r1), bench.FormatRatio(r2), overheadWords(math.Max(r1, r2)-1, "CPU-bound work"),
		tables[0].Overlap(hostRowShoal, hostRowHost), tables[1].Overlap(hostRowShoal, hostRowHost))
	return nil
}

// overheadWords describes a relative overhead (0.03 = 3 % slower).
func overheadWords(over float64, what string) string {
	switch {
	case math.IsNaN(over):
		return "One side has no numbers, so there is no comparison."
	case math.Abs(over) < 0.03:
		return fmt.Sprintf("Within 3 %%: for %s a container costs nothing measurable here, as the literature found for containers (unlike VMs).", what)
	case over > 0:
		return fmt.Sprintf("The container is %.0f %% slower for %s by the medians: shoal losing, unless the spreads overlap (said next when they do).", over*100, what)
	default:
		return fmt.Sprintf("The container is %.0f %% faster for %s, which is noise or a caching effect rather than a real gain.", -over*100, what)
	}
}

// writeCorpus writes size bytes of pseudo-English text, seeded.
func writeCorpus(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	words := strings.Fields("the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she there been one all we their has would when if so no will more can out who up said what some time about into than them only could new these other two may first then do any like my now over such our man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long here get both between life being under never day same another know while last might us great old year off come since against go came right used take three")
	rng := rand.New(rand.NewSource(1))
	var n int64
	for n < size {
		k, _ := w.WriteString(words[rng.Intn(len(words))])
		n += int64(k)
		sep := " "
		if rng.Intn(12) == 0 {
			sep = ".\n"
		}
		k, _ = w.WriteString(sep)
		n += int64(k)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// memory measures copy bandwidth by block size with the worker's kernel.
func (e *hostEnv) memory(ctx context.Context, rep *bench.Report) error {
	blocks := []int{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}
	total := int64(4 << 30)
	if e.o.Quick {
		blocks = []int{4 << 10, 1 << 20, 64 << 20}
		total = 256 << 20
	}
	rep.Heading("Memory bandwidth by block size")
	tab := bench.Table{Unit: "MB/s", HigherIsBetter: true, Baseline: hostRowHost,
		Note: fmt.Sprintf("`shoal bench-worker membw BLOCK %d`: Go's copy between two BLOCK-byte buffers until %d MiB have moved; "+
			"small blocks stay in cache, large ones go to memory. Each ratio is to the host row of the same block size.", total, total>>20)}
	var xs []float64
	ys := [][]float64{{}, {}}
	for _, b := range blocks {
		bs := strconv.Itoa(b)
		tot := strconv.FormatInt(total, 10)
		rows, err := e.pair(ctx, e.o.RunsOr(5, 2), []string{e.shoal, "bench-worker", "membw", bs, tot},
			[]string{"/shoal", "bench-worker", "membw", bs, tot}, nil, parseFloat)
		if err != nil {
			return err
		}
		label := sizeLabel(int64(b))
		rows[0].Name = hostRowHost + ", " + label
		rows[1].Name = hostRowShoal + ", " + label
		rows[0].Baseline, rows[1].Baseline = rows[0].Name, rows[0].Name
		tab.Rows = append(tab.Rows, rows...)
		xs = append(xs, math.Log2(float64(b)/1024))
		ys[0] = append(ys[0], tab.Median(rows[0].Name)/1000)
		ys[1] = append(ys[1], tab.Median(rows[1].Name)/1000)
	}
	tab.Baseline = hostRowHost
	rep.Table(tab)
	rep.Plot("host-membw.svg", "memory bandwidth by block size", bench.LineChart("Copy bandwidth, median GB/s, by block size (log2 KiB)",
		"block size, log2 of KiB (0 = 4 KiB ... 16 = 64 MiB)", "GB/s", []string{hostRowHost, hostRowShoal}, xs, ys))
	worst := 0.0
	for i := range xs {
		if r := ys[1][i] / ys[0][i]; !math.IsNaN(r) && math.Abs(1-r) > math.Abs(worst) {
			worst = 1 - r
		}
	}
	rep.Para("The largest difference between container and host over all block sizes is %.1f %% of the host's bandwidth (positive: the container is slower). %s",
		worst*100, overheadWords(worst, "memory copies"))
	return nil
}

func sizeLabel(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	default:
		return fmt.Sprintf("%d B", b)
	}
}

// vm states why the VM column is missing, from a probe of /dev/kvm.
func (e *hostEnv) vm(rep *bench.Report) {
	rep.Heading("Virtual machine")
	rep.Para("The literature's third column, the same workloads in a KVM guest, is not measured on this machine. %s "+
		"A guest would also need a kernel and disk image that the benchmark does not ship; shoal runs containers only, "+
		"so the VM numbers would describe what a user gives up by not picking a VM-based stack, not shoal.", kvmProbe())
}
