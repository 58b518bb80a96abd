package serving

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Row names of the HTTP/2 and gRPC tables.
const (
	svH2Shoal   = "shoal proxy (h2c) → replica"
	svH2Nginx   = "nginx (h2c) → replica"
	svGRPCShoal = "shoal proxy → grpcecho"
	svGRPCNginx = "nginx grpc_pass → grpcecho"
)

// h2Streams is how many streams h2load keeps open at once on its one
// connection.
const h2Streams = 100

// h2Result is what one h2load run reports.
type h2Result struct {
	rps    float64
	done   int
	failed int // failed, errored, timed out, or answered other than 2xx
}

// edge measures HTTP/2 on one connection with many streams and gRPC
// unary calls, through shoal's proxy and through nginx, in front of the
// same replicas: hello (HTTP/1.1 behind both) and grpcecho (cleartext
// HTTP/2 behind both: protocol = "grpc", and nginx's grpc_pass).
func (e *env) edge(ctx context.Context, rep *bench.Report) (retErr error) {
	rep.Heading("HTTP/2 and gRPC")
	if _, err := exec.LookPath("h2load"); err != nil {
		return fmt.Errorf("h2load (Debian's nghttp2-client): %w", err)
	}
	const web, rpc = "hello-h2", "grpcecho-b"
	if err := e.Deploy(ctx, web, "image = \"hello:1\"\n[scale]\nmin = 1\nmax = 1\nidle_timeout = \"10m\"\n[resources]\ncpu = 0\n"); err != nil {
		return err
	}
	if err := e.Deploy(ctx, rpc, "image = \"grpcecho:1\"\nprotocol = \"grpc\"\n[scale]\nmin = 1\nmax = 1\nidle_timeout = \"10m\"\n"+
		"[resources]\ncpu = 0\n[health]\ngrpc = true\n"); err != nil {
		return err
	}
	webAddr, err := e.readyAddr(ctx, web)
	if err != nil {
		return err
	}
	rpcAddr, err := e.readyAddr(ctx, rpc)
	if err != nil {
		return err
	}
	nginxWeb, nginxRPC, stop, err := e.startNginxH2(ctx, webAddr, rpcAddr)
	if err != nil {
		return err
	}
	defer func() {
		if err := stop(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	// grpcecho.Echo/Say's request: a google.protobuf.StringValue "hi" in
	// gRPC's length-prefixed framing.
	call := filepath.Join(e.Dir, "say.grpc")
	if err := os.WriteFile(call, []byte{0, 0, 0, 0, 4, 0x0a, 2, 'h', 'i'}, 0o644); err != nil {
		return err
	}
	secs := 5
	if e.Opts.Quick {
		secs = 1
	}
	h2load := func(name string, args ...string) bench.Subject {
		full := append([]string{"-c1", "-m" + strconv.Itoa(h2Streams), "-D", strconv.Itoa(secs), "--warm-up-time=1"}, args...)
		return bench.Subject{Name: name, Command: "h2load " + strings.Join(kit.QuoteArgs(full), " "), Run: func(ctx context.Context, _ int) (float64, error) {
			out, err := exec.CommandContext(ctx, "h2load", full...).CombinedOutput()
			if err != nil {
				return 0, fmt.Errorf("h2load: %w: %s", err, out)
			}
			r, err := parseH2load(string(out))
			if err != nil {
				return 0, err
			}
			e.Fail("HTTP/2 and gRPC", r.failed)
			return r.rps, nil
		}}
	}
	grpcArgs := []string{"-d", call, "-H", "content-type: application/grpc", "-H", "te: trailers"}
	rows, err := bench.Measure(ctx, e.Opts, 0, e.Opts.RunsOr(3, 1), []bench.Subject{
		h2load(svH2Shoal, "-H", ":authority: "+web+".localhost", "http://"+e.Proxy+"/"),
		h2load(svH2Nginx, "http://"+nginxWeb+"/"),
		h2load(svGRPCShoal, append(grpcArgs, "-H", ":authority: "+rpc+".localhost", "http://"+e.Proxy+"/grpcecho.Echo/Say")...),
		h2load(svGRPCNginx, append(grpcArgs, "http://"+nginxRPC+"/grpcecho.Echo/Say")...),
	})
	if err != nil {
		return err
	}
	h2 := bench.Table{Title: "HTTP/2 requests per second, one connection", Unit: "requests/s", HigherIsBetter: true, Baseline: svH2Nginx,
		Rows: rows[:2], Note: fmt.Sprintf("h2load, one cleartext HTTP/2 connection with prior knowledge and %d streams at once, "+
			"%d s per run after 1 s of warm-up, GET / of one hello replica (`cpu = 0`), which both proxies reach over kept-alive HTTP/1.1.", h2Streams, secs)}
	grpc := bench.Table{Title: "gRPC unary calls per second, one connection", Unit: "calls/s", HigherIsBetter: true, Baseline: svGRPCNginx,
		Rows: rows[2:], Note: fmt.Sprintf("h2load posting grpcecho.Echo/Say (a 9-byte gRPC message) on one connection with %d streams "+
			"at once, %d s per run, to one grpcecho replica (`protocol = \"grpc\"`, `cpu = 0`); nginx passes the calls with grpc_pass "+
			"over kept-alive HTTP/2.", h2Streams, secs)}
	rep.Table(h2)
	rep.Table(grpc)
	e.Tables = append(e.Tables, h2, grpc)
	rep.Para("Over one HTTP/2 connection shoal's proxy serves %s the requests per second of nginx, and %s its gRPC unary calls per second.",
		bench.FormatRatio(h2.Ratio(svH2Shoal, svH2Nginx)), bench.FormatRatio(grpc.Ratio(svGRPCShoal, svGRPCNginx)))
	if err := e.Remove(ctx, web); err != nil {
		return err
	}
	return e.Remove(ctx, rpc)
}

// readyAddr waits for app's one ready replica and returns its address.
func (e *env) readyAddr(ctx context.Context, app string) (string, error) {
	var addr string
	err := e.WaitFor(ctx, app, 60*time.Second, "ready", func(a types.App) bool {
		for _, r := range a.Replicas {
			if r.State == "ready" && r.Addr != "" {
				addr = r.Addr
				return true
			}
		}
		return false
	})
	return addr, err
}

// startNginxH2 runs nginx in the foreground with two cleartext HTTP/2
// listeners: one proxying to the HTTP/1.1 replica at web (kept-alive
// upstream connections), one passing gRPC calls to the replica at rpc.
// It returns their addresses and a stop function.
func (e *env) startNginxH2(ctx context.Context, web, rpc string) (string, string, func() error, error) {
	if _, err := exec.LookPath("nginx"); err != nil {
		return "", "", nil, fmt.Errorf("nginx: %w", err)
	}
	pw, err := kit.FreePort()
	if err != nil {
		return "", "", nil, err
	}
	pg, err := kit.FreePort()
	if err != nil {
		return "", "", nil, err
	}
	dir := filepath.Join(e.Dir, "nginx-h2")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", nil, err
	}
	confPath, err := writeNginxConf(dir, fmt.Sprintf(`    http2_max_concurrent_streams 128;
    # Its default of 1000 requests a connection ends h2load's one
    # connection within the first second.
    keepalive_requests 10000000;
    upstream web {
        server %[1]s;
        keepalive 64;
        keepalive_requests 10000000;
    }
    upstream rpc {
        server %[2]s;
        keepalive 64;
        keepalive_requests 10000000;
    }
    server {
        listen 127.0.0.1:%[3]d http2;
        location / {
            proxy_pass http://web;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
        }
    }
    server {
        listen 127.0.0.1:%[4]d http2;
        location / {
            grpc_pass grpc://rpc;
        }
    }
`, web, rpc, pw, pg))
	if err != nil {
		return "", "", nil, err
	}
	webAddr, rpcAddr := fmt.Sprintf("127.0.0.1:%d", pw), fmt.Sprintf("127.0.0.1:%d", pg)
	stop, err := runNginx(ctx, dir, confPath, webAddr, rpcAddr)
	if err != nil {
		return "", "", nil, err
	}
	return webAddr, rpcAddr, stop, nil
}

// parseH2load reads the requests per second and the failures from
// h2load's output.
func parseH2load(out string) (h2Result, error) {
	var r h2Result
	seen := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(strings.NewReplacer(",", "").Replace(line))
		switch {
		case strings.HasPrefix(line, "finished in ") && len(f) >= 5 && f[4] == "req/s":
			v, err := strconv.ParseFloat(f[3], 64)
			if err != nil {
				return r, fmt.Errorf("h2load: %q: %w", line, err)
			}
			r.rps, seen = v, true
		case strings.HasPrefix(line, "requests: "):
			// requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout
			for i := 1; i+1 < len(f); i += 2 {
				n, _ := strconv.Atoi(f[i])
				switch f[i+1] {
				case "done":
					r.done = n
				case "failed", "errored", "timeout":
					r.failed += n
				}
			}
		case strings.HasPrefix(line, "status codes: "):
			// status codes: N 2xx, N 3xx, N 4xx, N 5xx
			for i := 2; i+1 < len(f); i += 2 {
				if n, _ := strconv.Atoi(f[i]); f[i+1] != "2xx" {
					r.failed += n
				}
			}
		}
	}
	if !seen {
		return r, fmt.Errorf("h2load: no req/s in its output: %s", bench.OneLine(out))
	}
	return r, nil
}
