package lifecycle

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

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

// Row names of the first-response table.
const (
	httpHost        = "bare process on the host"
	httpShoalNone   = "shoal runtime API (runc, network none)"
	httpShoalBridge = "shoal runtime API (runc, network bridge)"
	httpShoalCrun   = "shoal runtime API (crun, network none)"
	httpRunc        = "bare runc (host network)"
	httpPodman      = "podman run -d (runc, host network)"
)

// firstResponse measures, for the hello example app, the time from asking
// for a container until its HTTP server answers GET /healthz with 200, then
// removes it (untimed). It adds its table to rep.
func firstResponse(ctx context.Context, o bench.Options, rep *bench.Report, env *apiEnv, dir string, runs int) error {
	hello, err := o.ExampleBinary(ctx, "hello", dir)
	if err != nil {
		return err
	}
	rootfs := filepath.Join(dir, "hello-rootfs")
	if err := kit.CopyFileMode(hello, filepath.Join(rootfs, "hello"), 0o755); err != nil {
		return err
	}
	podRoot := filepath.Join(dir, "hello-rootfs-podman")
	if err := kit.CopyFileMode(hello, filepath.Join(podRoot, "hello"), 0o755); err != nil {
		return err
	}
	img, err := env.images.Build(ctx, rootfs, kit.ImageBuildOptions("shoal-bench/hello:1"))
	if err != nil {
		return fmt.Errorf("hello image: %w", err)
	}
	rt, err := runtime.New(ctx, runtime.Options{Root: filepath.Join(dir, "http", "containers"), RuntimeRoot: filepath.Join(dir, "http", "state"),
		Runtime: "runc", CgroupParent: kit.BenchCgroupParent, Logger: kit.QuietLogger()})
	if err != nil {
		return err
	}
	env.rts = append(env.rts, rt)
	seq := 0
	shoal := func(mode network.Mode) func(context.Context, int) (float64, error) {
		return func(ctx context.Context, _ int) (float64, error) {
			seq++
			id := fmt.Sprintf("shoal-bench-http-%d-%d", os.Getpid(), seq)
			t0 := time.Now()
			att, err := env.net.Acquire(ctx, id, mode)
			if err != nil {
				return 0, err
			}
			defer env.net.Release(context.WithoutCancel(ctx), att)
			defer rt.Delete(context.WithoutCancel(ctx), id)
			if _, err := rt.Run(ctx, runtime.Spec{ID: id, Layers: img.Layers, Args: []string{"/hello"}, Env: []string{"PORT=8080"},
				ReadOnlyRootfs: true, NetNSPath: att.NSPath}); err != nil {
				return 0, err
			}
			d, addr := kit.Dialer{NSPath: att.NSPath}, "127.0.0.1:8080"
			if mode == network.Bridge {
				d, addr = kit.Dialer{}, att.IP.String()+":8080"
			}
			took, err := kit.WaitHTTP(ctx, d, addr, "/healthz", t0, 10*time.Second, nil)
			return bench.Millis(took)[0], err
		}
	}
	hostPort, err := kit.FreePort()
	if err != nil {
		return err
	}
	runcPort, err := kit.FreePort()
	if err != nil {
		return err
	}
	bare, err := kit.NewRunc(ctx, dir, rootfs, "runc-http", nil)
	if err != nil {
		return err
	}
	defer bare.Cleanup(context.WithoutCancel(ctx))
	if err := hostNetBundle(bare, "/hello", "PORT="+strconv.Itoa(runcPort)); err != nil {
		return err
	}
	podPort, err := kit.FreePort()
	if err != nil {
		return err
	}
	podName := fmt.Sprintf("shoal-bench-http-%d", os.Getpid())
	podArgs := func(name string, show bool) []string {
		port, root := strconv.Itoa(podPort), podRoot
		if show {
			port, root = "P", "DIR"
		}
		return []string{"--runtime", "runc", "run", "-d", "--rm", "--name", name, "--network", "host", "--read-only", "--cgroup-manager", "cgroupfs",
			"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "-e", "PORT=" + port, "--rootfs", root, "/hello"}
	}
	subjects := []bench.Subject{
		{Name: httpHost, Command: "PORT=P hello", Run: func(ctx context.Context, _ int) (float64, error) {
			cmd := exec.Command(hello)
			cmd.Env = []string{"PORT=" + strconv.Itoa(hostPort)}
			t0 := time.Now()
			if err := cmd.Start(); err != nil {
				return 0, err
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() { cmd.Process.Kill(); <-done }()
			took, err := kit.WaitHTTP(ctx, kit.Dialer{}, "127.0.0.1:"+strconv.Itoa(hostPort), "/healthz", t0, 10*time.Second, kit.ExitedChan(done))
			return bench.Millis(took)[0], err
		}},
		{Name: httpShoalNone, Command: "Acquire(none) + Run /hello; GET 127.0.0.1:8080 inside its namespace", Run: shoal(network.None)},
		{Name: httpShoalBridge, Command: "Acquire(bridge) + Run /hello; GET IP:8080", Run: shoal(network.Bridge)},
		{Name: httpRunc, Command: "runc run --detach --bundle B ID (no network namespace, PORT=P)", Run: func(ctx context.Context, i int) (float64, error) {
			t0 := time.Now()
			if err := bare.Runc(ctx, "run", "--detach", "--bundle", bare.Bundle, bare.ID(i)); err != nil {
				return 0, err
			}
			defer bare.Runc(context.WithoutCancel(ctx), "delete", "--force", bare.ID(i))
			took, err := kit.WaitHTTP(ctx, kit.Dialer{}, "127.0.0.1:"+strconv.Itoa(runcPort), "/healthz", t0, 10*time.Second, nil)
			return bench.Millis(took)[0], err
		}},
		{Name: httpPodman, Command: "podman " + strings.Join(podArgs("NAME", true), " "), Run: func(ctx context.Context, i int) (float64, error) {
			name := podName + "-" + strconv.Itoa(i)
			t0 := time.Now()
			out, err := exec.CommandContext(ctx, "podman", podArgs(name, false)...).CombinedOutput()
			kit.ReapExited("conmon")
			if err != nil {
				return 0, fmt.Errorf("podman run: %w: %s", err, bench.OneLine(string(out)))
			}
			defer func() {
				exec.Command("podman", "rm", "-f", "-t", "0", name).Run()
				kit.ReapExited("conmon")
			}()
			took, err := kit.WaitHTTP(ctx, kit.Dialer{}, "127.0.0.1:"+strconv.Itoa(podPort), "/healthz", t0, 10*time.Second, nil)
			return bench.Millis(took)[0], err
		}},
	}
	rows, err := bench.Measure(ctx, o, 1, runs, subjects)
	if err != nil {
		return err
	}
	crun := bench.Row{Name: httpShoalCrun, Command: "runtime.New(Runtime: \"crun\") + the same calls"}
	if err := runtime.CrunUsable(ctx); err != nil {
		crun.Err = err.Error()
	} else {
		crun.Err = "crun is usable here but not measured in this table"
	}
	rows = append(rows, crun)
	tab := bench.Table{Title: "First HTTP response", Unit: "ms", Baseline: httpRunc, Rows: rows,
		Note: "The hello example app (a static Go HTTP server) from the request for a container until GET /healthz answers 200, polled every " +
			"millisecond; removal is not timed. Bare runc and podman share the host's network (a fresh namespace would be unreachable without " +
			"one of shoal's); shoal's none row is reached from inside its namespace. P is a free port."}
	rep.Table(tab)
	rep.Para("The hello app answers %s ms after shoal is asked for it with network none and %s ms with a bridge, against %s ms on bare runc "+
		"(%s and %s) and %s ms with podman; the bare process needs %s ms. Bridge minus none is %s ms: %s",
		bench.FormatValue(tab.Median(httpShoalNone)), bench.FormatValue(tab.Median(httpShoalBridge)), bench.FormatValue(tab.Median(httpRunc)),
		bench.FormatRatio(tab.Ratio(httpShoalNone, httpRunc)), bench.FormatRatio(tab.Ratio(httpShoalBridge, httpRunc)), bench.FormatValue(tab.Median(httpPodman)),
		bench.FormatValue(tab.Median(httpHost)), bench.FormatValue(tab.Median(httpShoalBridge)-tab.Median(httpShoalNone)),
		"its namespace comes ready from shoal's pool, so what remains is the veth path to the first answer.")
	return nil
}

// hostNetBundle makes a runc baseline's bundle run args in the host's
// network namespace with env added.
func hostNetBundle(b *kit.Runc, arg0 string, env ...string) error {
	path := filepath.Join(b.Bundle, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return err
	}
	spec.Process.Args = []string{arg0}
	spec.Process.Env = append(spec.Process.Env, env...)
	var ns []specs.LinuxNamespace
	for _, n := range spec.Linux.Namespaces {
		if n.Type != specs.NetworkNamespace {
			ns = append(ns, n)
		}
	}
	spec.Linux.Namespaces = ns
	raw, err = json.Marshal(&spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}
