package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// A daemon restarted (its proxy process gone too) with --api-tcp on the
// port an app's TCP route listens on binds its API first: the route,
// restored when the daemon starts, does not take the port and keep the
// daemon from starting.
func TestAPIBoundBeforeRoutesRestored(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	port := freePort(t)
	d.deploy(fmt.Sprintf("name = \"hello\"\nimage = \"hello:1\"\nport = 8080\nprotocol = \"tcp\"\nlisten = %d\n"+
		"[scale]\nmin = 0\nmax = 1\n", port))
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitFor(t, "the TCP route's port "+addr+" bound by the proxy", func() bool {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	procs := d.proxyProcs()
	d.stop(syscall.SIGKILL)
	for _, pid := range procs {
		syscall.Kill(pid, syscall.SIGKILL)
		gone(pid)
	}
	d.extra = append(d.extra, "--api-tcp", addr)
	d.start()

	tok, err := os.ReadFile(filepath.Join(d.dataDir, "api-token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/health", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("the TCP API on %s: %v", addr, err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	var h types.Health
	if resp.StatusCode != 200 || json.Unmarshal(b, &h) != nil || h.Status != "ok" {
		t.Fatalf("the TCP API on %s: %d %s", addr, resp.StatusCode, b)
	}
}
