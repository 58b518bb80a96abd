package serving

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Row names of the HTTPS tables.
const (
	svTLSShoal = "shoal proxy (HTTPS) → replica"
	svTLSNginx = "nginx (HTTPS) → replica"
	svTLSCaddy = "Caddy (HTTPS) → replica"
)

// tlsDomain is the HTTPS part's app's custom domain, which the load tools
// find in an /etc/hosts of their own (they send it as SNI).
const tlsDomain = "edge.bench.test"

// tlsClients is how many new clients h2load starts at once to measure new
// handshakes: below shoal's cap of connections per client address.
const tlsClients = 100

// https measures HTTPS through shoal's proxy (--proxy-tls), nginx and
// Caddy, all three serving the same ECDSA P-256 certificate (from a CA the
// run makes) in front of the same hello replica over kept-alive HTTP/1.1:
// requests per second on kept-alive connections, new (full) TLS handshakes
// per second (a new client per request), and resumed ones (a returning
// client's new connection per request).
func (e *env) https(ctx context.Context, rep *bench.Report) (retErr error) {
	rep.Heading("HTTPS")
	if e.ProxyTLS == "" {
		return fmt.Errorf("the daemon runs no HTTPS listener (--proxy-tls)")
	}
	const app = "hello-tls"
	if err := e.Deploy(ctx, app, "image = \"hello:1\"\ndomains = [\""+tlsDomain+"\"]\n"+
		"[scale]\nmin = 1\nmax = 1\nidle_timeout = \"10m\"\n[resources]\ncpu = 0\n"); err != nil {
		return err
	}
	addr, err := e.readyAddr(ctx, app)
	if err != nil {
		return err
	}
	dir := filepath.Join(e.Dir, "tls")
	pool, certFile, keyFile, err := makeBenchCert(dir, tlsDomain)
	if err != nil {
		return err
	}
	if _, err := e.Daemon.CLI(ctx, "cert", "add", tlsDomain, "--cert", certFile, "--key", keyFile); err != nil {
		return err
	}
	if err := waitTLS(ctx, e.ProxyTLS, pool); err != nil {
		return fmt.Errorf("shoal's HTTPS listener: %w", err)
	}
	nginxAddr, stopNginx, err := e.startNginxTLS(ctx, dir, addr, certFile, keyFile)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopNginx(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	caddyAddr, stopCaddy, err := startCaddy(ctx, dir, addr, certFile, keyFile)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopCaddy(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	for _, a := range []string{nginxAddr, caddyAddr} {
		if err := waitTLS(ctx, a, pool); err != nil {
			return err
		}
	}
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost "+tlsDomain+"\n"), 0o644); err != nil {
		return err
	}
	url := func(a string) string {
		_, port, _ := net.SplitHostPort(a)
		return "https://" + tlsDomain + ":" + port + "/"
	}
	secs := 5
	if e.Opts.Quick {
		secs = 1
	}
	wrk := func(name string, args ...string) bench.Subject {
		full := append([]string{"-t2", "-c32", fmt.Sprintf("-d%ds", secs), "--timeout", "5s"}, args...)
		return bench.Subject{Name: name, Command: "wrk " + strings.Join(kit.QuoteArgs(full), " "), Run: func(ctx context.Context, _ int) (float64, error) {
			out, err := outputWithHosts(ctx, hosts, "wrk", full...)
			if err != nil {
				return 0, fmt.Errorf("wrk: %w: %s", err, out)
			}
			r, err := parseWrk(string(out))
			if err != nil {
				return 0, err
			}
			e.Fail("HTTPS", r.failed)
			return r.rps, nil
		}}
	}
	targets := []struct{ name, url string }{{svTLSShoal, url(e.ProxyTLS)}, {svTLSNginx, url(nginxAddr)}, {svTLSCaddy, url(caddyAddr)}}
	// A short unrecorded run against each opens the upstream connections
	// and warms every path.
	for _, t := range targets {
		if out, err := outputWithHosts(ctx, hosts, "wrk", "-t2", "-c32", "-d1s", t.url); err != nil {
			return fmt.Errorf("wrk warm-up: %w: %s", err, out)
		}
	}
	// A new client's handshake: h2load's clients each open one
	// connection for one request, with no session to resume; repeated
	// until the run's time is up.
	full := func(name, url string) bench.Subject {
		args := []string{"--h1", "-t2", "-c" + strconv.Itoa(tlsClients), "-n" + strconv.Itoa(tlsClients), url}
		return bench.Subject{Name: name, Command: fmt.Sprintf("h2load %s, again until %d s have passed", strings.Join(args, " "), secs),
			Run: func(ctx context.Context, _ int) (float64, error) {
				done, took := 0, 0.0
				for start := time.Now(); took == 0 || time.Since(start) < time.Duration(secs)*time.Second; {
					out, err := outputWithHosts(ctx, hosts, "h2load", args...)
					if err != nil {
						return 0, fmt.Errorf("h2load: %w: %s", err, out)
					}
					r, err := parseH2load(string(out))
					if err != nil {
						return 0, err
					}
					e.Fail("HTTPS", r.failed)
					if r.rps <= 0 || r.done == 0 {
						return 0, fmt.Errorf("h2load: no request done: %s", bench.OneLine(string(out)))
					}
					done += r.done
					took += float64(r.done) / r.rps
				}
				return float64(done) / took, nil
			}}
	}
	closeHdr := []string{"-H", "Connection: close"}
	var subjects []bench.Subject
	for _, t := range targets {
		subjects = append(subjects, wrk(t.name, t.url))
	}
	for _, t := range targets {
		subjects = append(subjects, full(t.name, t.url))
	}
	for _, t := range targets {
		subjects = append(subjects, wrk(t.name, append(closeHdr, t.url)...))
	}
	rows, err := bench.Measure(ctx, e.Opts, 0, e.Opts.RunsOr(3, 1), subjects)
	if err != nil {
		return err
	}
	kept := bench.Table{Title: "HTTPS requests per second, kept-alive connections", Unit: "requests/s", HigherIsBetter: true, Baseline: svTLSNginx,
		Rows: rows[:3], Note: fmt.Sprintf("wrk, 2 threads and 32 kept-alive HTTP/1.1 connections over TLS for %d s per run, GET / of one "+
			"hello replica (`cpu = 0`) through each server, which reaches it over kept-alive HTTP/1.1. The three serve the same ECDSA P-256 "+
			"certificate for %s (from a CA the run makes; `shoal cert add` for shoal's `--proxy-tls` listener) with their default TLS "+
			"settings (TLS 1.3 here); the load tools find the name in an /etc/hosts of their own (a mount namespace) and send it as SNI. "+
			"A 1 s unrecorded run against each comes first; the three tables' runs are interleaved.", secs, tlsDomain)}
	hs := bench.Table{Title: "New TLS handshakes per second", Unit: "handshakes/s", HigherIsBetter: true, Baseline: svTLSNginx,
		Rows: rows[3:6], Note: fmt.Sprintf("h2load over HTTP/1.1, %d clients at once in 2 threads, each opening one connection for one "+
			"request: a full TLS 1.3 handshake (no session to resume; the servers' logs show none resumed), repeated for %d s per run; "+
			"handshakes (requests) over h2load's own elapsed time.", tlsClients, secs)}
	resumed := bench.Table{Title: "Resumed TLS handshakes per second", Unit: "handshakes/s", HigherIsBetter: true, Baseline: svTLSNginx,
		Rows: rows[6:], Note: fmt.Sprintf("wrk as for kept-alive connections but with `Connection: close`: each server closes the "+
			"connection after its one answer and wrk opens a new one resuming the session of the last (a returning client), %d s per run.", secs)}
	rep.Table(kept)
	rep.Table(hs)
	rep.Table(resumed)
	e.Tables = append(e.Tables, kept, hs, resumed)
	rep.Para("Over HTTPS shoal's proxy serves %s the requests per second of nginx (Caddy %s) on kept-alive connections, "+
		"%s its new handshakes per second (Caddy %s) and %s its resumed ones (Caddy %s).",
		bench.FormatRatio(kept.Ratio(svTLSShoal, svTLSNginx)), bench.FormatRatio(kept.Ratio(svTLSCaddy, svTLSNginx)),
		bench.FormatRatio(hs.Ratio(svTLSShoal, svTLSNginx)), bench.FormatRatio(hs.Ratio(svTLSCaddy, svTLSNginx)),
		bench.FormatRatio(resumed.Ratio(svTLSShoal, svTLSNginx)), bench.FormatRatio(resumed.Ratio(svTLSCaddy, svTLSNginx)))
	if _, err := e.Daemon.CLI(ctx, "cert", "rm", tlsDomain); err != nil {
		return err
	}
	return e.Remove(ctx, app)
}

// makeBenchCert makes, in dir, a CA and an ECDSA P-256 certificate it
// signed for domain, valid for a day; it returns a pool with the CA and
// the files of the certificate (the leaf, then the CA) and its key.
func makeBenchCert(dir, domain string) (*x509.CertPool, string, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", "", err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "shoal bench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: domain}, DNSNames: []string{domain},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, "", "", err
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, chain, 0o644); err != nil {
		return nil, "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, "", "", err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, certFile, keyFile, nil
}

// waitTLS polls a TLS handshake for tlsDomain with addr until the server
// presents a certificate pool trusts for the name, for up to 30 s.
func waitTLS(ctx context.Context, addr string, pool *x509.CertPool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		d := tls.Dialer{Config: &tls.Config{ServerName: tlsDomain, RootCAs: pool}}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("TLS handshake for %s with %s: %w", tlsDomain, addr, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// outputWithHosts runs name with args, as CombinedOutput does, in a mount
// namespace of its own where /etc/hosts is the file hosts: the load tools
// resolve tlsDomain there, and send it as SNI. The namespace is made on a
// thread locked to a goroutine that ends with the run (the thread with
// it), so the rest of the process keeps the host's /etc/hosts.
func outputWithHosts(ctx context.Context, hosts, name string, args ...string) ([]byte, error) {
	type result struct {
		out []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			ch <- result{err: fmt.Errorf("unshare a mount namespace: %w", err)}
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			ch <- result{err: fmt.Errorf("make / private: %w", err)}
			return
		}
		if err := unix.Mount(hosts, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
			ch <- result{err: fmt.Errorf("bind %s on /etc/hosts: %w", hosts, err)}
			return
		}
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		ch <- result{out, err}
	}()
	r := <-ch
	return r.out, r.err
}

// startNginxTLS runs nginx with an HTTPS listener for tlsDomain on the
// certificate in certFile and keyFile (a shared session cache, tickets on
// as by default), proxying to the replica at addr over kept-alive
// HTTP/1.1, and returns its address and a stop function.
func (e *env) startNginxTLS(ctx context.Context, dir, addr, certFile, keyFile string) (string, func() error, error) {
	if _, err := exec.LookPath("nginx"); err != nil {
		return "", nil, fmt.Errorf("nginx: %w", err)
	}
	port, err := kit.FreePort()
	if err != nil {
		return "", nil, err
	}
	ndir := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(ndir, 0o755); err != nil {
		return "", nil, err
	}
	confPath, err := writeNginxConf(ndir, fmt.Sprintf(`    keepalive_requests 10000000;
    upstream replica {
        server %[1]s;
        keepalive 64;
        keepalive_requests 10000000;
    }
    server {
        listen 127.0.0.1:%[2]d ssl http2;
        server_name %[3]s;
        ssl_certificate %[4]s;
        ssl_certificate_key %[5]s;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
        location / {
            proxy_pass http://replica;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
        }
    }
`, addr, port, tlsDomain, certFile, keyFile))
	if err != nil {
		return "", nil, err
	}
	nginxAddr := fmt.Sprintf("127.0.0.1:%d", port)
	stop, err := runNginx(ctx, ndir, confPath, nginxAddr)
	if err != nil {
		return "", nil, err
	}
	return nginxAddr, stop, nil
}

// startCaddy runs Caddy with an HTTPS site for tlsDomain on the
// certificate in certFile and keyFile (no automatic certificates, no admin
// endpoint, no HTTP/3), reverse-proxying to the replica at addr over
// kept-alive HTTP/1.1, and returns its address and a stop function.
func startCaddy(ctx context.Context, dir, addr, certFile, keyFile string) (string, func() error, error) {
	if _, err := exec.LookPath("caddy"); err != nil {
		return "", nil, fmt.Errorf("caddy (Debian's caddy): %w", err)
	}
	port, err := kit.FreePort()
	if err != nil {
		return "", nil, err
	}
	cdir := filepath.Join(dir, "caddy")
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return "", nil, err
	}
	conf := fmt.Sprintf(`{
	admin off
	auto_https off
	storage file_system %[1]s/data
	servers {
		protocols h1 h2
	}
}
https://%[2]s:%[3]d {
	bind 127.0.0.1
	tls %[4]s %[5]s
	reverse_proxy %[6]s {
		transport http {
			keepalive 5m
			keepalive_idle_conns 64
		}
	}
}
`, cdir, tlsDomain, port, certFile, keyFile, addr)
	confPath := filepath.Join(cdir, "Caddyfile")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return "", nil, err
	}
	cmd := exec.Command("caddy", "run", "--config", confPath, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+cdir, "XDG_DATA_HOME="+cdir+"/data", "XDG_CONFIG_HOME="+cdir+"/config")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(cdir, "caddy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("caddy: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() error {
		select {
		case <-done:
			return nil
		default:
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		return nil
	}
	caddyAddr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := kit.WaitTCP(ctx, kit.Dialer{}, caddyAddr); err != nil {
		stop()
		return "", nil, fmt.Errorf("caddy on %s: %w: %s", caddyAddr, err, kit.Tail(logPath, 10))
	}
	return caddyAddr, stop, nil
}
