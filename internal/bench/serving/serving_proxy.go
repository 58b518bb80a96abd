package serving

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Row names of the throughput tables.
const (
	svShoal  = "shoal proxy → replica"
	svNginx  = "nginx → replica"
	svDirect = "direct to the replica"
)

// wrkResult is what one wrk run reports.
type wrkResult struct {
	rps      float64
	p50, p99 float64 // ms
	failed   int     // socket errors and answers other than 2xx/3xx
	requests int
}

// throughput runs wrk for a bounded time against shoal's proxy, nginx and
// the replica itself, all in front of the same hello replica.
func (e *env) throughput(ctx context.Context, rep *bench.Report) (retErr error) {
	rep.Heading("Proxy throughput and latency")
	const app = "hello-wrk"
	if err := e.Deploy(ctx, app, "image = \"hello:1\"\n[scale]\nmin = 1\nmax = 1\nidle_timeout = \"10m\"\n[resources]\ncpu = 0\n"); err != nil {
		return err
	}
	var addr string
	if err := e.WaitFor(ctx, app, 30*time.Second, "ready", func(a types.App) bool {
		for _, r := range a.Replicas {
			if r.State == "ready" && r.Addr != "" {
				addr = r.Addr
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	nginxAddr, stop, err := e.startNginx(ctx, addr)
	if err != nil {
		return err
	}
	defer func() {
		if err := stop(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	secs := 5
	if e.Opts.Quick {
		secs = 1
	}
	results := map[string][]wrkResult{}
	wrk := func(name string, args ...string) bench.Subject {
		full := append([]string{"-t2", "-c32", fmt.Sprintf("-d%ds", secs), "--timeout", "5s", "--latency"}, args...)
		return bench.Subject{Name: name, Command: "wrk " + strings.Join(kit.QuoteArgs(full), " "), Run: func(ctx context.Context, _ int) (float64, error) {
			out, err := exec.CommandContext(ctx, "wrk", full...).CombinedOutput()
			if err != nil {
				return 0, fmt.Errorf("wrk: %w: %s", err, out)
			}
			r, err := parseWrk(string(out))
			if err != nil {
				return 0, err
			}
			e.Fail("proxy throughput", r.failed)
			results[name] = append(results[name], r)
			return r.rps, nil
		}}
	}
	targets := [][]string{
		{"-H", "Host: " + app + ".localhost", "http://" + e.Proxy + "/"},
		{"http://" + nginxAddr + "/"},
		{"http://" + addr + "/"},
	}
	// A short unrecorded run against each opens the pooled connections
	// and warms the caches of every path.
	for _, t := range targets {
		args := append([]string{"-t2", "-c32", "-d1s"}, t...)
		if out, err := exec.CommandContext(ctx, "wrk", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("wrk warm-up: %w: %s", err, out)
		}
	}
	rows, err := bench.Measure(ctx, e.Opts, 0, e.Opts.RunsOr(3, 1), []bench.Subject{
		wrk(svShoal, targets[0]...),
		wrk(svNginx, targets[1]...),
		wrk(svDirect, targets[2]...),
	})
	if err != nil {
		return err
	}
	tput := bench.Table{Title: "Requests per second", Unit: "requests/s", HigherIsBetter: true, Baseline: svNginx, Rows: rows,
		Note: fmt.Sprintf("wrk, 2 threads and 32 connections for %d s per run, against one hello replica without a CPU quota "+
			"(`cpu = 0`, `min = max = 1`); nginx runs in the foreground with an upstream to the replica's address and kept-alive "+
			"upstream connections. A 1 s unrecorded run against each comes first; then every request of each run counts.", secs)}
	rep.Table(tput)
	lat := func(title string, pick func(wrkResult) float64) bench.Table {
		t := bench.Table{Title: title, Unit: "ms", Baseline: svNginx,
			Note: "wrk's own latency percentile of each run (`--latency`), summarised over the runs."}
		for _, w := range rows {
			row := bench.Row{Name: w.Name, Command: w.Command, Err: w.Err}
			for _, r := range results[w.Name] {
				row.Values = append(row.Values, pick(r))
			}
			t.Rows = append(t.Rows, row)
		}
		return t
	}
	p50 := lat("Latency p50 under load", func(r wrkResult) float64 { return r.p50 })
	p99 := lat("Latency p99 under load", func(r wrkResult) float64 { return r.p99 })
	rep.Table(p50)
	rep.Table(p99)
	e.Tables = append(e.Tables, tput, p50, p99)
	rep.Plot("serving-proxy.svg", "requests per second: shoal proxy, nginx, direct",
		bench.BarsOf("Requests per second, median", []string{"hello replica"}, []string{svShoal, svNginx, svDirect}, []bench.Table{tput}))
	ratio := tput.Ratio(svShoal, svNginx)
	rep.Para("shoal's proxy serves %s the requests per second of nginx in front of the same replica (target ≥ 0.8×: %s) and %s "+
		"of a direct connection; its p99 latency under this load is %s ms against nginx's %s ms.",
		bench.FormatRatio(ratio), bench.Verdict(ratio, func(v float64) bool { return v >= 0.8 }), bench.FormatRatio(tput.Ratio(svShoal, svDirect)),
		bench.FormatValue(p99.Median(svShoal)), bench.FormatValue(p99.Median(svNginx)))
	return e.Remove(ctx, app)
}

// startNginx runs nginx in the foreground on a free loopback port with one
// upstream, the replica at addr, and returns its address and a stop
// function.
func (e *env) startNginx(ctx context.Context, addr string) (string, func() error, error) {
	if _, err := exec.LookPath("nginx"); err != nil {
		return "", nil, fmt.Errorf("nginx: %w", err)
	}
	port, err := kit.FreePort()
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(e.Dir, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	confPath, err := writeNginxConf(dir, fmt.Sprintf(`    upstream replica {
        server %[1]s;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:%[2]d;
        location / {
            proxy_pass http://replica;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
        }
    }
`, addr, port))
	if err != nil {
		return "", nil, err
	}
	nginxAddr := fmt.Sprintf("127.0.0.1:%d", port)
	stop, err := runNginx(ctx, dir, confPath, nginxAddr)
	if err != nil {
		return "", nil, err
	}
	return nginxAddr, stop, nil
}

// writeNginxConf writes dir/nginx.conf with the head every nginx of this
// bench shares (root, all workers, its pid, error log and temporary files
// under dir, no access log) and, inside its http block, body: the caller's
// settings, upstreams and servers. It returns the file's path.
func writeNginxConf(dir, body string) (string, error) {
	conf := fmt.Sprintf(`user root;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
`, dir) + body + "}\n"
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return "", err
	}
	return confPath, nil
}

// runNginx runs nginx on the configuration at confPath with its prefix and
// logs in dir, in a process group of its own, and returns once it accepts
// on every one of addrs. stop ends it (SIGQUIT, SIGKILL after 5 s).
func runNginx(ctx context.Context, dir, confPath string, addrs ...string) (stop func() error, err error) {
	cmd := exec.Command("nginx", "-p", dir, "-c", confPath, "-g", "daemon off;")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nginx: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop = func() error {
		select {
		case <-done:
			return nil
		default:
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		return nil
	}
	for _, a := range addrs {
		if err := kit.WaitTCP(ctx, kit.Dialer{}, a); err != nil {
			stop()
			return nil, fmt.Errorf("nginx on %s: %w: %s", a, err, kit.Tail(filepath.Join(dir, "stderr.log"), 5)+kit.Tail(filepath.Join(dir, "error.log"), 5))
		}
	}
	return stop, nil
}

// parseWrk reads requests/s, the latency distribution and the errors from
// wrk's output.
func parseWrk(out string) (wrkResult, error) {
	r := wrkResult{p50: math.NaN(), p99: math.NaN()}
	sc := bufio.NewScanner(strings.NewReader(out))
	seenRPS := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return r, fmt.Errorf("wrk: %q: %w", sc.Text(), err)
			}
			r.rps, seenRPS = v, true
		case len(f) == 2 && f[0] == "50%":
			r.p50 = wrkDuration(f[1])
		case len(f) == 2 && f[0] == "99%":
			r.p99 = wrkDuration(f[1])
		case len(f) >= 3 && f[1] == "requests" && f[2] == "in":
			r.requests, _ = strconv.Atoi(f[0])
		case len(f) >= 2 && f[0] == "Socket" && f[1] == "errors:":
			for i := 2; i+1 < len(f); i += 2 {
				n, _ := strconv.Atoi(strings.TrimSuffix(f[i+1], ","))
				r.failed += n
			}
		case len(f) == 5 && f[0] == "Non-2xx":
			n, _ := strconv.Atoi(f[4])
			r.failed += n
		}
	}
	if !seenRPS {
		return r, fmt.Errorf("wrk: no Requests/sec in its output: %s", bench.OneLine(out))
	}
	return r, nil
}

// wrkDuration converts wrk's "1.23ms", "456.00us" or "1.01s" to ms.
func wrkDuration(s string) float64 {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"us", 1e-3}, {"ms", 1}, {"s", 1000}, {"m", 60000}} {
		if strings.HasSuffix(s, u.suffix) {
			v, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suffix), 64)
			if err != nil {
				return math.NaN()
			}
			return v * u.ms
		}
	}
	return math.NaN()
}
