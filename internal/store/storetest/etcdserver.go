package storetest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/keptproc"
)

// EtcdBinary is where StartEtcd looks first for the etcd server; PATH is
// searched after it.
const EtcdBinary = "/usr/bin/etcd"

// StartEtcd starts a single-member etcd server on free loopback ports with
// its data in a temporary folder, waits until it reports healthy, and stops it
// when the test ends. It returns the client endpoint (http://127.0.0.1:PORT).
// A missing etcd binary fails the test.
//
// The server runs with short heartbeat and election timeouts so that it is
// ready quickly and its minimum lease TTL is one second.
func StartEtcd(t testing.TB) string {
	t.Helper()
	bin := EtcdBinary
	if _, err := os.Stat(bin); err != nil {
		p, lerr := exec.LookPath("etcd")
		if lerr != nil {
			t.Fatalf("etcd server not found at %s or in PATH: install the Debian package etcd-server (apt-get install etcd-server)", EtcdBinary)
		}
		bin = p
	}
	dir := t.TempDir()
	var lastErr error
	// A free port can be taken by someone else between probing and binding;
	// try fresh ports a few times.
	for attempt := 1; attempt <= 3; attempt++ {
		ep, err := startEtcd(t, bin, filepath.Join(dir, fmt.Sprintf("try%d", attempt)))
		if err == nil {
			return ep
		}
		lastErr = err
	}
	t.Fatalf("etcd server did not start: %v", lastErr)
	return ""
}

func startEtcd(t testing.TB, bin, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	logPath := filepath.Join(dir, "etcd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	cmd := exec.Command(bin,
		"--name", "default",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer,
		"--initial-cluster-state", "new",
		"--heartbeat-interval", "25",
		"--election-timeout", "250",
		"--logger", "zap",
		"--log-outputs", "stderr",
	)
	cmd.Env = os.Environ()
	if runtime.GOARCH != "amd64" {
		cmd.Env = append(cmd.Env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited, err := keptproc.Start(cmd)
	if err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			return "", fmt.Errorf("etcd exited early; log %s:\n%s", logPath, tail(logPath))
		default:
		}
		if healthy(client) {
			t.Cleanup(stop)
			return client, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("etcd at %s not healthy after 30s; log %s:\n%s", client, logPath, tail(logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func healthy(endpoint string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(endpoint + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`))
}

// freePorts finds n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
