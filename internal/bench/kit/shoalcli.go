package kit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/dataplane"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/userns"
)

// BenchImage is the tag of the busybox image every shoal subject runs.
const BenchImage = "shoal-bench/busybox:1"

// Daemon is a shoal daemon started from the real binary for the benchmark,
// with its own data and run folders, socket, bridge and subnet.
type Daemon struct {
	bin     string
	dataDir string
	runDir  string
	host    string // SHOAL_HOST
	sock    string
	logPath string
	args    []string // of `shoal daemon`
	daemon  *exec.Cmd
	exited  chan struct{}
	HTTP    *http.Client
	net     DaemonNet
}

// DaemonNet is the bridge, subnet and cgroup parent a benchmark daemon uses,
// apart from those of other suites and of any daemon on the host, and
// flags of its own (Args).
type DaemonNet struct {
	Bridge, Subnet, CgroupParent string
	Args                         []string
}

// StartDaemon starts `shoal daemon` on the lifecycle suite's network and
// waits until /v1/health answers.
func StartDaemon(ctx context.Context, bin, dir string) (*Daemon, error) {
	return startDaemonOn(ctx, bin, dir, DaemonNet{Bridge: daemonBenchBridge, Subnet: daemonBenchSubnet, CgroupParent: DaemonBenchCgroupParent})
}

// StartDaemonOn starts `shoal daemon` on network n, apart from the
// daemons of other suites, and waits until /v1/health answers.
func StartDaemonOn(ctx context.Context, bin, dir string, n DaemonNet) (*Daemon, error) {
	return startDaemonOn(ctx, bin, dir, n)
}

// startDaemonOn starts `shoal daemon` on network n and waits until
// /v1/health answers.
func startDaemonOn(ctx context.Context, bin, dir string, n DaemonNet) (*Daemon, error) {
	e := &Daemon{
		net:     n,
		bin:     bin,
		dataDir: filepath.Join(dir, "data"),
		runDir:  filepath.Join(dir, "run"),
		sock:    filepath.Join(dir, "shoal.sock"),
		logPath: filepath.Join(dir, "daemon.log"),
		exited:  make(chan struct{}),
	}
	e.host = "unix://" + e.sock
	e.HTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", e.sock)
		},
	}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("shoal daemon: %w", err)
	}
	e.args = []string{"daemon", "--data-dir", e.dataDir, "--run-dir", e.runDir, "--api", e.host,
		"--runtime", "runc", "--bridge", n.Bridge, "--subnet", n.Subnet, "--cgroup-parent", n.CgroupParent,
		"--log-level", "debug", "--log-format", "json"}
	if help, _ := exec.CommandContext(ctx, bin, "daemon", "--help").CombinedOutput(); bytes.Contains(help, []byte("--proxy")) {
		e.args = append(e.args, "--proxy", "127.0.0.1:0")
	}
	e.args = append(e.args, n.Args...)
	if err := e.launch(ctx, os.O_TRUNC); err != nil {
		return nil, err
	}
	return e, nil
}

// RunDir is the daemon's --run-dir (its runtime's state under runc/).
func (e *Daemon) RunDir() string { return e.runDir }

// Restart stops the daemon with sig (SIGKILL: a crash), waits for it to
// exit, and starts it again on the same folders; it returns once the new
// daemon answers /v1/health.
func (e *Daemon) Restart(ctx context.Context, sig syscall.Signal) error {
	e.daemon.Process.Signal(sig)
	select {
	case <-e.exited:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("shoal daemon did not exit on %s", sig)
	}
	e.exited = make(chan struct{})
	return e.launch(ctx, os.O_APPEND)
}

// launch starts the daemon with e.args, its output going to e.logPath
// (truncated or appended to, by flag), and waits until /v1/health
// answers. A daemon that does not come up is stopped and cleaned up.
func (e *Daemon) launch(ctx context.Context, flag int) (retErr error) {
	logFile, err := os.OpenFile(e.logPath, os.O_WRONLY|os.O_CREATE|flag, 0o644)
	if err != nil {
		return fmt.Errorf("shoal daemon log: %w", err)
	}
	defer logFile.Close()
	e.daemon = exec.Command(e.bin, e.args...)
	e.daemon.Stdout, e.daemon.Stderr = logFile, logFile
	if err := e.daemon.Start(); err != nil {
		return fmt.Errorf("start %s daemon: %w", e.bin, err)
	}
	cmd, exited := e.daemon, e.exited
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		if retErr != nil {
			e.Close(context.WithoutCancel(ctx))
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("shoal daemon exited at start: %s", Tail(e.logPath, 10))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := e.Get(ctx, "/v1/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shoal daemon not healthy after 30s: %s", Tail(e.logPath, 10))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *Daemon) Get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://shoal"+path, nil)
	if err != nil {
		return nil, err
	}
	return e.HTTP.Do(req)
}

// CLI runs the shoal binary against the daemon and returns how long it took.
func (e *Daemon) CLI(ctx context.Context, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = append(os.Environ(), "SHOAL_HOST="+e.host)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("shoal %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return d, nil
}

// CLISubject returns a run function that times one CLI invocation.
func (e *Daemon) CLISubject(args ...string) func(context.Context, int) (map[string]time.Duration, error) {
	return func(ctx context.Context, _ int) (map[string]time.Duration, error) {
		d, err := e.CLI(ctx, args...)
		if err != nil {
			return nil, err
		}
		return map[string]time.Duration{PhaseTotal: d}, nil
	}
}

// DaemonPhases reads the runtime's debug lines from the daemon log:
// "container created" (bundle, runtime, total) and "container deleted"
// (runtime, total), keyed like phaseLog ("created.bundle", ...). Only lines
// after skip lines of each message are kept, to leave out warm-up runs.
func (e *Daemon) DaemonPhases(skip map[string]int) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	f, err := os.Open(e.logPath)
	if err != nil {
		return out
	}
	defer f.Close()
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		msg, _ := line["msg"].(string)
		if !strings.HasPrefix(msg, "container created") && !strings.HasPrefix(msg, "container deleted") {
			continue
		}
		msg = strings.TrimPrefix(msg, "container ")
		seen[msg]++
		if seen[msg] <= skip[msg] {
			continue
		}
		for k, v := range line {
			s, ok := v.(string)
			if !ok {
				continue
			}
			if d, err := time.ParseDuration(s); err == nil {
				out[msg+"."+k] = append(out[msg+"."+k], d)
			}
		}
	}
	return out
}

// CountLines counts the daemon's "container created" and "container deleted"
// lines so far.
func (e *Daemon) CountLines() map[string]int {
	n := map[string]int{}
	for k, v := range e.DaemonPhases(nil) {
		if strings.HasSuffix(k, ".total") {
			n[strings.TrimSuffix(k, ".total")] = len(v)
		}
	}
	return n
}

// Close removes every container the daemon still holds, stops the daemon,
// and then removes whatever it left on the host: runtime state, overlay
// mounts, idmapped layers, cgroups and network namespaces, through shoal's
// own recovery.
func (e *Daemon) Close(ctx context.Context) error {
	var errs []string
	if e.daemon != nil && e.daemon.Process != nil {
		select {
		case <-e.exited:
		default:
			e.daemon.Process.Signal(syscall.SIGTERM)
			select {
			case <-e.exited:
			case <-time.After(15 * time.Second):
				e.daemon.Process.Kill()
				<-e.exited
			}
		}
	}
	// A daemon that had to be killed leaves its proxy process running.
	dataplane.StopStale(ctx, e.runDir, slog.New(slog.DiscardHandler))
	rt, err := runtime.New(ctx, runtime.Options{
		Root:        filepath.Join(e.dataDir, "containers"),
		RuntimeRoot: filepath.Join(e.runDir, "runc"),
		Runtime:     "runc",
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err == nil {
		if _, _, err := rt.Recover(ctx); err != nil {
			errs = append(errs, fmt.Sprintf("remove daemon containers: %v", err))
		}
		// Recover opens the disk pool a killed daemon left, to remove it;
		// Close unmounts the pool's own mount.
		rt.Close()
	} else if !os.IsNotExist(err) {
		errs = append(errs, fmt.Sprintf("open daemon runtime: %v", err))
	}
	nm, err := network.New(ctx, network.Options{
		StateDir: filepath.Join(e.runDir, "netns"), CNIConfDir: filepath.Join(e.dataDir, "cni"),
		Bridge: e.net.Bridge, Subnet: e.net.Subnet, PoolSize: -1, Logger: slog.New(slog.DiscardHandler),
	})
	if err == nil {
		if err := nm.Restore(ctx, nil); err != nil {
			errs = append(errs, fmt.Sprintf("remove daemon namespaces: %v", err))
		}
		if err := nm.Close(ctx); err != nil {
			errs = append(errs, fmt.Sprintf("close daemon network: %v", err))
		}
	} else {
		errs = append(errs, fmt.Sprintf("open daemon network: %v", err))
	}
	// A daemon that had to be killed leaves its apps' idmapped layers.
	if err := userns.RemoveLayers(userns.LayersDir(e.dataDir)); err != nil {
		errs = append(errs, fmt.Sprintf("remove daemon idmapped layers: %v", err))
	}
	// The daemon's cgroup parents (its own and its jobs'), empty by now.
	if err := RemoveCgroups(e.net.CgroupParent+"-jobs", e.net.CgroupParent); err != nil {
		errs = append(errs, fmt.Sprintf("remove daemon cgroups: %v", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("shoal daemon cleanup: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Tail returns the last n lines of a file, for error messages.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Bridge and subnet of the benchmark's own network, apart from a daemon's
// default shoal0 and 10.77.0.0/16.
const (
	BenchBridge       = "shoalbn0"
	BenchSubnet       = "10.182.0.0/16"
	daemonBenchBridge = "shoalbd0"
	daemonBenchSubnet = "10.183.0.0/16"
	// The suite's cgroup parents, apart from any daemon on the host (a
	// daemon removes unknown cgroups under its own parent).
	BenchCgroupParent       = "/shoal-bench"
	DaemonBenchCgroupParent = "/shoal-bench-daemon"
)

// Pid is the process id of the running daemon (0 before it started).
func (e *Daemon) Pid() int {
	if e.daemon == nil || e.daemon.Process == nil {
		return 0
	}
	return e.daemon.Process.Pid
}

// StartTimings reads the controller's "serving: start timing" debug lines
// of the starts of apps named prefix-something from the premade tier (or
// not): each duration in them (woken, start, boot, route, since_woken) by
// key, and the probes made as counts.
func (e *Daemon) StartTimings(prefix string, premade bool) (map[string][]time.Duration, []int) {
	out := map[string][]time.Duration{}
	var probes []int
	f, err := os.Open(e.logPath)
	if err != nil {
		return out, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg     string `json:"msg"`
			App     string `json:"app"`
			Premade bool   `json:"premade"`
			Probes  int    `json:"probes"`
			Woken   *int64 `json:"woken"`
			Start   int64  `json:"start"`
			Boot    int64  `json:"boot"`
			Route   int64  `json:"route"`
			Since   *int64 `json:"since_woken"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "serving: start timing" ||
			line.Premade != premade || !strings.HasPrefix(line.App, prefix+"-") {
			continue
		}
		out["start"] = append(out["start"], time.Duration(line.Start))
		out["boot"] = append(out["boot"], time.Duration(line.Boot))
		out["route"] = append(out["route"], time.Duration(line.Route))
		if line.Woken != nil && line.Since != nil {
			out["woken"] = append(out["woken"], time.Duration(*line.Woken))
			out["since_woken"] = append(out["since_woken"], time.Duration(*line.Since))
		}
		probes = append(probes, line.Probes)
	}
	return out, probes
}

// RestoreTimings reads the node's "replica start timing" debug lines of
// the restores of replicas named prefix-something, with the runtime's
// "container created" line of each: by key, the replica's spec, its
// network namespace and policy, its log pipe and its container (bundle
// and OCI runtime's restore, and the rest: "bundle", "runtime").
func (e *Daemon) RestoreTimings(prefix string) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	f, err := os.Open(e.logPath)
	if err != nil {
		return out
	}
	defer f.Close()
	created := map[string][2]time.Duration{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg       string `json:"msg"`
			Container string `json:"container"`
			Bundle    string `json:"bundle"`
			Runtime   string `json:"runtime"`
			Replica   string `json:"replica"`
			Restore   bool   `json:"restore"`
			Spec      int64  `json:"spec"`
			Network   int64  `json:"network"`
			Log       int64  `json:"log"`
			Ctr       int64  `json:"container_ns"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch {
		case line.Msg == "container created" && strings.HasPrefix(line.Container, prefix+"-"):
			b, err1 := time.ParseDuration(line.Bundle)
			r, err2 := time.ParseDuration(line.Runtime)
			if err1 == nil && err2 == nil {
				created[line.Container] = [2]time.Duration{b, r}
			}
		case line.Msg == "replica start timing" && line.Restore && strings.HasPrefix(line.Replica, prefix+"-"):
			c, ok := created[line.Replica]
			if !ok {
				continue
			}
			out["spec"] = append(out["spec"], time.Duration(line.Spec))
			out["network"] = append(out["network"], time.Duration(line.Network))
			out["log"] = append(out["log"], time.Duration(line.Log))
			out["container"] = append(out["container"], time.Duration(line.Ctr))
			out["bundle"] = append(out["bundle"], c[0])
			out["runtime"] = append(out["runtime"], c[1])
		}
	}
	return out
}
