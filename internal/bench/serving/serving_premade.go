package serving

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/bench/kit"
)

// servingOldNet is the network of the suite's second daemon, which keeps
// no premade replica: the cold starts of the old path, measured beside.
var servingOldNet = kit.DaemonNet{Bridge: "shoalbv1", Subnet: "10.192.0.0/16", CgroupParent: "/shoal-bench-serving-old",
	Args: []string{"--premade", "-1"}}

// waitPremade waits until app has a premade replica whose pid 1, shoal-init,
// waits for its entrypoint (runc's state under runDir), then a moment for
// the controller to take it as made; it returns the replica's id.
func waitPremade(ctx context.Context, runDir, app string) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		states, _ := filepath.Glob(filepath.Join(runDir, "runc", app+"-*", "state.json"))
		for _, st := range states {
			b, err := os.ReadFile(st)
			if err != nil {
				continue
			}
			const key = `"init_process_pid":`
			i := strings.Index(string(b), key)
			if i < 0 {
				continue
			}
			rest := string(b[i+len(key):])
			pid, _ := strconv.Atoi(rest[:strings.IndexAny(rest, ",}")])
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); string(cmd) == "/dev/shoal-init\x00" {
				select {
				case <-time.After(300 * time.Millisecond):
				case <-ctx.Done():
					return "", ctx.Err()
				}
				return filepath.Base(filepath.Dir(st)), nil
			}
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return "", fmt.Errorf("app %s: no premade replica after 30s", app)
}

// bareBoot starts the hello binary on the host on a free loopback port and
// returns the time from its start to the first byte of its answer to a
// GET, polled every 0.2 ms; the process is killed after.
func bareBoot(ctx context.Context, bin string) (time.Duration, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "PORT="+port)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("%s: %w", bin, err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := t0.Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err != nil {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: hello\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		took := time.Since(t0)
		c.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", bin, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("%s: %s", bin, resp.Status)
		}
		return took, nil
	}
	return 0, fmt.Errorf("%s: no answer on port %s after 10s", bin, port)
}
