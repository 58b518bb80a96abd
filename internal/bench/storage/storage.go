// Package storage is the storage benchmark suite: overlay (shoal's
// default), a plain copy of the root file system and a bind volume compared
// on create time, small-file reads and writes from 10 to 100 000 files, and
// SQLite queries and table copies from ~150 kB to ~100 MB. The workloads
// run through `shoal bench-worker` (package worker), on the host and from a
// copy of the static shoal binary inside the container.
package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
	"github.com/shoal-run/shoal/internal/bench/worker"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

func init() {
	bench.Register(bench.Suite{Name: "storage", Title: "Storage: overlayfs vs a plain copy vs a bind volume", Run: Storage})
}

const storageCgroupParent = "/shoal-bench-storage"

// Row names of the storage suite.
const (
	stHost    = "host"
	stOverlay = "shoal, overlay (default)"
	stPlain   = "plain copy of the rootfs (runc)"
	stVolume  = "shoal, bind volume"
)

type storageEnv struct {
	o    bench.Options
	dir  string
	k    *kit.Local
	base string // worker root file system without data
}

// Storage runs the storage suite: container create time and small-file
// reads and writes with 10 to 100 000 files, and SQLite reads and table
// copies on databases of growing size, on shoal's overlay root, on a plain
// copy of the root file system (run by bare runc, as a copying storage
// driver would), on a bind-mounted volume, and on the host.
func Storage(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("storage: the shoal binary to run as the workload is required")
	}
	rep := bench.NewReport(ctx, "storage", "Storage: overlayfs vs a plain copy vs a bind volume", o)
	dir, err := o.ScratchDir("storage")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := runtime.BecomeSubreaper(); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	e := &storageEnv{o: o, dir: dir, base: filepath.Join(dir, "base")}
	if err := kit.WorkerRootfs(ctx, e.base, o.ShoalBin, "sqlite3"); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	if e.k, err = kit.NewLocal(ctx, filepath.Join(dir, "kit"), storageCgroupParent, "", ""); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	defer func() {
		if err := e.k.Close(context.WithoutCancel(ctx)); err != nil && retErr == nil {
			retErr = err
		}
	}()
	rep.Para("Four places for a container's files, measured in the same run: *%s*, shoal's root file system (an overlay whose "+
		"lower layer is the image, files written land in a per-container upper layer); *%s*, the image copied into an ordinary folder "+
		"for every container (what a copying storage driver such as vfs does; shoal has no such mode, so bare runc runs it); *%s*, a "+
		"host folder bind-mounted into a shoal container; and *%s*, the same program as a bare process. Programs time themselves "+
		"(`shoal bench-worker`), so container start-up is not in the read and write figures. Writes end in a syncfs, so they "+
		"include the flush to disk; the host is synced, untimed, before each write run.", stOverlay, stPlain, stVolume, stHost)
	if err := e.files(ctx, rep); err != nil {
		return rep, err
	}
	if err := e.sqlite(ctx, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// synced makes every subject flush the host's dirty data before its run.
// The programs time themselves, so the flush is not in the figures.
func synced(subjects []bench.Subject) []bench.Subject {
	for i := range subjects {
		run := subjects[i].Run
		subjects[i].Run = func(ctx context.Context, n int) (float64, error) {
			unix.Sync()
			return run(ctx, n)
		}
	}
	return subjects
}

// show replaces the scratch folder in a command with DIR.
func (e *storageEnv) show(cmd string) string { return strings.ReplaceAll(cmd, e.dir, "DIR") }

// files measures create time and small-file reads and writes by count.
func (e *storageEnv) files(ctx context.Context, rep *bench.Report) error {
	counts := []int{10, 1000, 100000}
	if e.o.Quick {
		counts = []int{10, 1000}
	}
	runs := e.o.RunsOr(3, 2)
	var create, read, write []bench.Table
	for _, n := range counts {
		e.o.Logf("storage: preparing %d files", n)
		rootfs := filepath.Join(e.dir, fmt.Sprintf("rootfs-%d", n))
		if err := exec.CommandContext(ctx, "cp", "-a", e.base, rootfs).Run(); err != nil {
			return fmt.Errorf("storage: copy rootfs: %w", err)
		}
		if _, err := worker.WriteFiles(filepath.Join(rootfs, "data"), n); err != nil {
			return fmt.Errorf("storage: %w", err)
		}
		layers, err := e.k.Image(ctx, rootfs, fmt.Sprintf("shoal-bench/files:%d", n))
		if err != nil {
			return err
		}
		plain, err := kit.NewRunc(ctx, e.dir, filepath.Join(e.dir, fmt.Sprintf("plain-%d", n)), fmt.Sprintf("plain-%d", n), nil)
		if err != nil {
			return err
		}
		defer plain.Cleanup(context.WithoutCancel(ctx))
		plainRoot := filepath.Join(e.dir, fmt.Sprintf("plain-%d", n))
		copyRoot := func(ctx context.Context) error {
			os.RemoveAll(plainRoot)
			if out, err := exec.CommandContext(ctx, "cp", "-a", rootfs, plainRoot).CombinedOutput(); err != nil {
				return fmt.Errorf("cp -a: %w: %s", err, out)
			}
			return nil
		}
		label := fmt.Sprintf("%d files", n)
		// Copying 100 000 files takes seconds: fewer runs there.
		cruns, cwarm := runs, 1
		if n >= 100000 {
			cruns, cwarm = e.o.RunsOr(2, 2), 0
		}
		// Create: the container exists and can be started.
		rows, err := bench.Measure(ctx, e.o, cwarm, cruns, []bench.Subject{
			{Name: stOverlay, Command: "runtime API Create (overlay mount, bundle, runc create)", Run: func(ctx context.Context, _ int) (float64, error) {
				t0 := time.Now()
				b, err := e.k.Create(ctx, runtime.Spec{Layers: layers, Args: []string{"/bin/true"}}, network.None, false)
				d := time.Since(t0)
				if err != nil {
					return 0, err
				}
				return bench.Millis(d)[0], b.Remove(ctx)
			}},
			{Name: stPlain, Command: "cp -a IMAGE ROOT; runc create --bundle B ID", Run: func(ctx context.Context, i int) (float64, error) {
				if err := setBundleArgs(plain, false, "/bin/true"); err != nil {
					return 0, err
				}
				t0 := time.Now()
				if err := copyRoot(ctx); err != nil {
					return 0, err
				}
				if err := plain.Runc(ctx, "create", "--bundle", plain.Bundle, plain.ID(i)); err != nil {
					return 0, err
				}
				d := time.Since(t0)
				return bench.Millis(d)[0], plain.Runc(ctx, "delete", "--force", plain.ID(i))
			}},
		})
		if err != nil {
			return err
		}
		create = append(create, bench.Table{Title: "Create with " + label, Unit: "ms", Baseline: stOverlay, Rows: rows})

		// Reads and writes: the plain copy stays for them.
		if err := copyRoot(ctx); err != nil {
			return err
		}
		vol := filepath.Join(e.dir, fmt.Sprintf("vol-%d", n))
		if err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(rootfs, "data"), vol).Run(); err != nil {
			return fmt.Errorf("storage: volume: %w", err)
		}
		volMount := []runtime.Mount{{Source: vol, Destination: "/vol"}}
		ns := strconv.Itoa(n)
		inBox := func(mounts []runtime.Mount, args ...string) func(context.Context, int) (float64, error) {
			return func(ctx context.Context, _ int) (float64, error) {
				out, err := e.k.Run(ctx, runtime.Spec{Layers: layers, Args: args, Mounts: mounts})
				if err != nil {
					return 0, err
				}
				return parseMillis(out)
			}
		}
		inPlain := func(args ...string) func(context.Context, int) (float64, error) {
			return func(ctx context.Context, i int) (float64, error) {
				if err := setBundleArgs(plain, false, args...); err != nil {
					return 0, err
				}
				out, err := plain.Output(ctx, plain.ID(i))
				if err != nil {
					return 0, err
				}
				return parseMillis(out)
			}
		}
		onHost := func(args ...string) func(context.Context, int) (float64, error) {
			return func(ctx context.Context, _ int) (float64, error) {
				out, err := kit.HostRun(ctx, e.o.ShoalBin, args...)
				if err != nil {
					return 0, err
				}
				return parseMillis(out)
			}
		}
		rows, err = bench.Measure(ctx, e.o, 1, runs, []bench.Subject{
			{Name: stHost, Command: e.show("shoal bench-worker files-read " + vol), Run: onHost("bench-worker", "files-read", vol)},
			{Name: stOverlay, Command: "shoal bench-worker files-read /data (image layer)", Run: inBox(nil, "/shoal", "bench-worker", "files-read", "/data")},
			{Name: stPlain, Command: "shoal bench-worker files-read /data", Run: inPlain("/shoal", "bench-worker", "files-read", "/data")},
			{Name: stVolume, Command: "shoal bench-worker files-read /vol", Run: inBox(volMount, "/shoal", "bench-worker", "files-read", "/vol")},
		})
		if err != nil {
			return err
		}
		read = append(read, bench.Table{Title: "Read " + label, Unit: "ms", Baseline: stHost, Rows: rows})
		hostW := filepath.Join(e.dir, "hostw")
		// Writing many files ends in a syncfs of a file system the host
		// shares: no warm-up, fewer runs at the largest count, and a sync
		// (untimed: the workers time themselves) before each run so that
		// no run pays for what an earlier step left dirty.
		wruns := runs
		if n >= 100000 {
			wruns = e.o.RunsOr(2, 2)
		}
		rows, err = bench.Measure(ctx, e.o, 0, wruns, synced([]bench.Subject{
			{Name: stHost, Command: "shoal bench-worker files-write DIR/w " + ns, Run: func(ctx context.Context, i int) (float64, error) {
				defer os.RemoveAll(hostW)
				return onHost("bench-worker", "files-write", hostW, ns)(ctx, i)
			}},
			{Name: stOverlay, Command: "shoal bench-worker files-write /w " + ns + " (upper layer)", Run: inBox(nil, "/shoal", "bench-worker", "files-write", "/w", ns)},
			{Name: stPlain, Command: "shoal bench-worker files-write /w " + ns, Run: func(ctx context.Context, i int) (float64, error) {
				defer os.RemoveAll(filepath.Join(plainRoot, "w"))
				return inPlain("/shoal", "bench-worker", "files-write", "/w", ns)(ctx, i)
			}},
			{Name: stVolume, Command: "shoal bench-worker files-write /vol/w " + ns, Run: func(ctx context.Context, i int) (float64, error) {
				defer os.RemoveAll(filepath.Join(vol, "w"))
				return inBox(volMount, "/shoal", "bench-worker", "files-write", "/vol/w", ns)(ctx, i)
			}},
		}))
		if err != nil {
			return err
		}
		write = append(write, bench.Table{Title: "Write " + label, Unit: "ms", Baseline: stHost, Rows: rows})
		os.RemoveAll(rootfs)
		os.RemoveAll(plainRoot)
		os.RemoveAll(vol)
	}
	rep.Heading("Container create time by number of files in the image")
	for _, t := range create {
		t.Note = "From the call until the container exists (not started); the overlay row is shoal's runtime API, the plain-copy row copies the image's folder first."
		rep.Table(t)
	}
	var groups []string
	for _, n := range counts {
		groups = append(groups, strconv.Itoa(n))
	}
	rep.Plot("storage-create.svg", "create time by file count", bench.BarsOf("Container create, median ms, by files in the image",
		groups, []string{stOverlay, stPlain}, create))
	last := create[len(create)-1]
	rep.Para("With %s, creating a container on overlay takes %s ms and on a plain copy %s ms (%s): overlay's create time does not "+
		"grow with the image (%s ms at %d files), a copy's does. This is why shoal mounts overlays.",
		strings.TrimPrefix(last.Title, "Create with "), bench.FormatValue(last.Median(stOverlay)), bench.FormatValue(last.Median(stPlain)),
		bench.FormatRatio(last.Ratio(stPlain, stOverlay)), bench.FormatValue(create[0].Median(stOverlay)), counts[0])
	rep.Heading("Small files: read all, write new")
	for _, t := range read {
		t.Note = "`files-read` walks the folder and reads every 1 KiB file; page cache warm after the warm-up run."
		rep.Table(t)
	}
	for _, t := range write {
		t.Note = "`files-write` writes N new 1 KiB files in folders of 1000, then syncs the file system."
		rep.Table(t)
	}
	rep.Plot("storage-files.svg", "small-file reads and writes", bench.BarsOf(fmt.Sprintf("Small files, median ms (%s files; read, write)", groups[len(groups)-1]),
		[]string{"read", "write"}, []string{stHost, stOverlay, stPlain, stVolume}, []bench.Table{read[len(read)-1], write[len(write)-1]}))
	lr, lw := read[len(read)-1], write[len(write)-1]
	rep.Para("At %s, reading through overlay takes %s of the host's time (plain copy %s, volume %s), and writing %s (plain copy %s, volume %s). %s",
		groups[len(groups)-1]+" files", bench.FormatRatio(lr.Ratio(stOverlay, stHost)), bench.FormatRatio(lr.Ratio(stPlain, stHost)), bench.FormatRatio(lr.Ratio(stVolume, stHost)),
		bench.FormatRatio(lw.Ratio(stOverlay, stHost)), bench.FormatRatio(lw.Ratio(stPlain, stHost)), bench.FormatRatio(lw.Ratio(stVolume, stHost)),
		loseWords(map[string]float64{"overlay reads": lr.Ratio(stOverlay, stHost), "overlay writes": lw.Ratio(stOverlay, stHost)}))
	return nil
}

// loseWords names where the ratios (container over host, times) exceed 1.1.
func loseWords(r map[string]float64) string {
	var lose []string
	for k, v := range r {
		if v > 1.1 {
			lose = append(lose, fmt.Sprintf("%s (%s)", k, bench.FormatRatio(v)))
		}
	}
	if len(lose) == 0 {
		return "Overlay stays within 10 % of the host here."
	}
	return "shoal's overlay loses against the host on " + strings.Join(lose, " and ") + "."
}

func parseMillis(out string) (float64, error) {
	d, err := kit.ParseNS(out)
	return bench.Millis(d)[0], err
}

// setBundleArgs rewrites a runc baseline's bundle to run args.
func setBundleArgs(b *kit.Runc, readonly bool, args ...string) error {
	path := filepath.Join(b.Bundle, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return err
	}
	spec.Process.Args = args
	spec.Root.Readonly = readonly
	raw, err = json.Marshal(&spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}
