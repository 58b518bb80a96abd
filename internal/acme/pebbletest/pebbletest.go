// Package pebbletest runs Pebble, Let's Encrypt's ACME test server
// (github.com/letsencrypt/pebble/v2, the version go.mod pins as a tool),
// for tests: on loopback, with its own test certificate for its API, real
// validation of challenges (no PEBBLE_VA_ALWAYS_VALID) against the ports a
// test names, and names resolved by pebble-challtestsrv (every name A
// 127.0.0.1). The binaries are built once into a cache. No test ever talks
// to a public CA.
package pebbletest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/keptproc"
)

// Module is the Go module Pebble comes from.
const Module = "github.com/letsencrypt/pebble/v2"

// Blocked is a name Pebble refuses to issue for (rejectedIdentifier),
// for tests of a CA's refusal.
const Blocked = "blocked.shoal.test"

// Pebble is a running Pebble server.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// APIRoot is the file of the root its API's certificate chains to
	// (Pebble's minica root): what a client trusts to talk to it.
	APIRoot string
	mgmt    string
	apiPool *x509.CertPool
}

// Options say where Pebble validates challenges.
type Options struct {
	// HTTPPort and TLSPort are the ports HTTP-01 and TLS-ALPN-01
	// validations connect to on 127.0.0.1 (the proxy's plain and TLS
	// ports).
	HTTPPort, TLSPort int
	// Validity is a certificate's lifetime (0: Pebble's default, 90 days).
	Validity time.Duration
	// APIIP is where Pebble's ACME API listens ("": 127.0.0.1), e.g. a
	// bridge's address that daemons in network namespaces reach; its
	// certificate, signed by Pebble's minica root (APIRoot), names it.
	APIIP string
}

var (
	buildOnce sync.Once
	bins      struct {
		pebble, chall, certs string
		err                  error
	}
)

// binaries builds pebble and pebble-challtestsrv once into
// /var/cache/shoal/pebble/<version>, and finds Pebble's test certificates
// in its module.
func binaries() (pebble, chall, certs string, err error) {
	buildOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", Module).Output()
		if err != nil {
			bins.err = fmt.Errorf("go list -m %s: %w", Module, err)
			return
		}
		version, dir, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
		if !ok || dir == "" {
			// Not downloaded yet: go build below fetches it, then ask again.
			if out, err := exec.Command("go", "mod", "download", Module).CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go mod download %s: %w\n%s", Module, err, out)
				return
			}
			out, _ = exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", Module).Output()
			version, dir, _ = strings.Cut(strings.TrimSpace(string(out)), " ")
		}
		bins.certs = filepath.Join(dir, "test", "certs")
		cache := filepath.Join("/var/cache/shoal/pebble", version)
		for _, c := range []struct {
			name string
			dst  *string
		}{{"pebble", &bins.pebble}, {"pebble-challtestsrv", &bins.chall}} {
			*c.dst = filepath.Join(cache, c.name)
			if _, err := os.Stat(*c.dst); err == nil {
				continue
			}
			if err := os.MkdirAll(cache, 0o755); err != nil {
				bins.err = err
				return
			}
			tmp := fmt.Sprintf("%s.%d", *c.dst, os.Getpid())
			if out, err := exec.Command("go", "build", "-o", tmp, Module+"/cmd/"+c.name).CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("build %s: %w\n%s", c.name, err, out)
				return
			}
			if err := os.Rename(tmp, *c.dst); err != nil {
				bins.err = err
				return
			}
		}
	})
	return bins.pebble, bins.chall, bins.certs, bins.err
}

// freePort returns a loopback TCP port nobody listens on now (Pebble takes
// its addresses from a file; a start that loses the port to another
// process is tried again).
func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs Pebble and its DNS server until the test ends; it fails the
// test when they cannot run.
func Start(t testing.TB, o Options) *Pebble {
	t.Helper()
	pebbleBin, challBin, certs, err := binaries()
	if err != nil {
		t.Fatalf("pebble: %v", err)
	}
	var last error
	for try := 0; try < 5; try++ {
		p, err := start(t, o, pebbleBin, challBin, certs)
		if err == nil {
			return p
		}
		last = err
	}
	t.Fatalf("pebble: %v", last)
	return nil
}

func start(t testing.TB, o Options, pebbleBin, challBin, certs string) (*Pebble, error) {
	dir := t.TempDir()
	dns := freePort(t)
	chall := exec.Command(challBin, "-http01", "", "-https01", "", "-doh", "", "-tlsalpn01", "",
		"-dnsserver", "127.0.0.1:"+strconv.Itoa(dns), "-management", "127.0.0.1:"+strconv.Itoa(freePort(t)),
		"-defaultIPv4", "127.0.0.1", "-defaultIPv6", "")
	challLog, stopChall, err := run(t, chall, filepath.Join(dir, "challtestsrv.log"))
	if err != nil {
		return nil, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	apiCert, apiKey := filepath.Join(certs, "localhost", "cert.pem"), filepath.Join(certs, "localhost", "key.pem")
	if o.APIIP != "" {
		l, err := net.Listen("tcp", net.JoinHostPort(o.APIIP, "0"))
		if err != nil {
			stopChall()
			return nil, fmt.Errorf("pebble's API on %s: %w", o.APIIP, err)
		}
		listen = l.Addr().String()
		l.Close()
		if apiCert, apiKey, err = apiCertFor(dir, certs, o.APIIP); err != nil {
			stopChall()
			return nil, err
		}
	}
	cfg := map[string]any{
		"listenAddress":           listen,
		"managementListenAddress": "127.0.0.1:" + strconv.Itoa(freePort(t)),
		"certificate":             apiCert,
		"privateKey":              apiKey,
		"httpPort":                o.HTTPPort,
		"tlsPort":                 o.TLSPort,
		"domainBlocklist":         []string{Blocked},
		"retryAfter":              map[string]int{"authz": 1, "order": 1},
		"keyAlgorithm":            "ecdsa",
	}
	if o.Validity > 0 {
		cfg["profiles"] = map[string]any{"default": map[string]any{
			"description": "tests", "validityPeriod": int64(o.Validity / time.Second)}}
	}
	b, _ := json.Marshal(map[string]any{"pebble": cfg})
	conf := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		return nil, err
	}
	pb := exec.Command(pebbleBin, "-config", conf, "-dnsserver", "127.0.0.1:"+strconv.Itoa(dns))
	pb.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	pebbleLog, stopPebble, err := run(t, pb, filepath.Join(dir, "pebble.log"))
	if err != nil {
		stopChall()
		return nil, err
	}
	p := &Pebble{
		Directory: "https://" + cfg["listenAddress"].(string) + "/dir",
		APIRoot:   filepath.Join(certs, "pebble.minica.pem"),
		mgmt:      "https://" + cfg["managementListenAddress"].(string),
	}
	p.apiPool = x509.NewCertPool()
	root, err := os.ReadFile(p.APIRoot)
	if err != nil || !p.apiPool.AppendCertsFromPEM(root) {
		stopPebble()
		stopChall()
		return nil, fmt.Errorf("pebble's API root %s: %v", p.APIRoot, err)
	}
	// Up once its directory and management API answer, the DNS server
	// once it takes a connection.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, derr := p.get(p.Directory)
		_, merr := p.get(p.mgmt + "/roots/0")
		c, cerr := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(dns), time.Second)
		if cerr == nil {
			c.Close()
		}
		if derr == nil && merr == nil && cerr == nil {
			break
		}
		if exited(pebbleLog) || exited(challLog) || time.Now().After(deadline) {
			stopPebble()
			stopChall()
			return nil, fmt.Errorf("did not start: %v / %v / %v\npebble: %s\nchalltestsrv: %s",
				derr, merr, cerr, pebbleLog.tail(), challLog.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		stopPebble()
		stopChall()
		if t.Failed() {
			t.Logf("pebble's log:\n%s", pebbleLog.tail())
		}
	})
	return p, nil
}

// procLog is a process's output file and whether it has exited.
type procLog struct {
	path string
	done <-chan struct{}
}

func exited(l *procLog) bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (l *procLog) tail() string {
	b, _ := os.ReadFile(l.path)
	if len(b) > 8192 {
		b = b[len(b)-8192:]
	}
	return string(b)
}

func run(t testing.TB, cmd *exec.Cmd, logPath string) (*procLog, func(), error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done, err := keptproc.Start(cmd)
	if err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	stop := func() {
		cmd.Process.Kill()
		<-done
	}
	return &procLog{path: logPath, done: done}, stop, nil
}

func (p *Pebble) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: p.apiPool}}}
}

func (p *Pebble) get(url string) ([]byte, error) {
	resp, err := p.client().Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// IssuingRoot returns the root Pebble's certificates chain to (from its
// management API, /roots/0): what a client of the sites trusts. Pebble
// makes a new one each time it starts.
func (p *Pebble) IssuingRoot(ctx context.Context) (*x509.CertPool, []byte, error) {
	b, err := p.get(p.mgmt + "/roots/0")
	if err != nil {
		return nil, nil, fmt.Errorf("pebble's issuing root: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, nil, fmt.Errorf("pebble's issuing root: no PEM certificate in %q", b)
	}
	return pool, b, nil
}

// apiCertFor makes, in dir, a certificate for Pebble's API naming ip (and
// localhost, 127.0.0.1), signed by Pebble's minica root in certs.
func apiCertFor(dir, certs, ip string) (certFile, keyFile string, err error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(certs, "pebble.minica.pem"), filepath.Join(certs, "pebble.minica.key.pem"))
	if err != nil {
		return "", "", fmt.Errorf("pebble's minica root: %w", err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return "", "", fmt.Errorf("pebble's minica root: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost", "pebble"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(ip)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, pair.PrivateKey)
	if err != nil {
		return "", "", fmt.Errorf("pebble's API certificate: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "api-cert.pem"), filepath.Join(dir, "api-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
