// Package imagetest gives tests real images and a real registry: a busybox
// rootfs (BusyboxDir, Busybox) and Debian's docker-registry on a loopback
// port, plain (StartRegistry) or behind TLS with a CA made for the test,
// htpasswd users and client certificates (StartPrivateRegistry).
package imagetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RegistryBinary is the registry StartRegistry runs (Debian's docker-registry).
const RegistryBinary = "/usr/bin/docker-registry"

// StartRegistry runs docker-registry with filesystem storage in a temporary
// directory on a free 127.0.0.1 port, waits until it answers /v2/, and stops
// it when the test ends. It returns "127.0.0.1:<port>". The test fails if the
// registry is missing or does not come up.
func StartRegistry(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(RegistryBinary); err != nil {
		t.Fatalf("registry: %v (install the docker-registry package)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("registry: free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()

	dir := t.TempDir()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "data"), addr)
	runRegistry(t, dir, cfg, "http://"+addr+"/v2/", http.DefaultClient, http.StatusOK)
	return addr
}

// runRegistry starts docker-registry with configuration cfg (written into
// dir) and waits until probe answers want.
func runRegistry(t testing.TB, dir, cfg, probe string, client *http.Client, want int) {
	t.Helper()
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatalf("registry: %v", err)
	}
	var out bytes.Buffer
	cmd := exec.Command(RegistryBinary, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("registry: start: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, probe, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		select {
		case err := <-done:
			t.Fatalf("registry exited: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("registry at %s did not answer: %v\n%s", probe, ctx.Err(), out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
