package e2e

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/route"
)

// TestDebianApachePreforkConnections: Debian's Apache with mod_php runs a
// process per connection (prefork). Under 100 clients at once through the
// proxy, no request waits behind a connection in Apache's accept queue
// for a worker to end another keep-alive connection: the proxy keeps at
// most route.DefaultMaxConns connections open to the replica, each with a
// worker of its own (Apache is started with that many), and the other
// requests wait in the proxy, in order. The old pool dialed a connection
// per concurrent request and reused the most recently used ones: 101
// connections to 32 workers, 72 of them in the accept queue, where their
// requests waited until a worker's keep-alive connection ended (max 9-15 s
// through shoal against 1.4 s straight to the replica). Sampled in the
// replica's network namespace: the connections to Apache's port (accepted
// or queued) and the length of its accept queue (logged: connections
// dialed at once wait there a moment for a free worker to be scheduled).
func TestDebianApachePreforkConnections(t *testing.T) {
	d := startDaemon(t)
	manifest := d.debianImage("apache-php")
	raw, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	m := string(raw)
	workers := route.DefaultMaxConns
	// One replica; prefork started with a worker per connection the proxy
	// may open, and no idle worker reaped before the load.
	m = strings.Replace(m, "min = 0\nmax = 4", "min = 1\nmax = 1", 1)
	m = strings.Replace(m, "\n[scale]", fmt.Sprintf(`
command = ["/usr/local/bin/apache2-foreground", "-c", "StartServers %d", "-c", "MinSpareServers 5", "-c", "MaxSpareServers %d"]

[scale]`, workers, 2*workers), 1)
	if !strings.Contains(m, "max = 1") || !strings.Contains(m, "StartServers") {
		t.Fatalf("%s: the test's edits did not apply:\n%s", manifest, m)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("apache-php's log:\n%.4000s", d.shoal("app", "logs", "apache-php").stdout)
		}
	})
	d.deploy(m)
	proxy := d.proxyAddr()
	a := d.waitApp("apache-php", "one ready replica", func(a types.App) bool { return a.Ready == 1 && len(a.Replicas) == 1 })
	r := a.Replicas[0]
	if code, body, _ := get(t, proxy, "apache-php", "/"); code != 200 || !strings.Contains(body, "PHP Version") {
		t.Fatalf("GET /: %d, %d bytes", code, len(body))
	}
	port := 80
	waitFor(t, fmt.Sprintf("Apache's %d workers", workers), func() bool {
		n := 0
		for _, p := range procTree(r.Pid) {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(comm)) == "apache2" {
				n++
			}
		}
		return n >= workers+1 // and the parent
	})

	// Sample the replica's sockets while 100 clients send 1000 requests.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var most, queued, samples int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			conns, backlog, err := tcpPort(r.Pid, port)
			if err != nil {
				continue // the replica's netns is read-only to races, not gone
			}
			samples++
			most = max(most, conns)
			queued = max(queued, backlog)
		}
	}()
	failed, first := load(t, proxy, "apache-php", "/", 1000, 100)
	close(stop)
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d of 1000 requests failed, the first: %s", failed, first)
	}
	t.Logf("%d samples: at most %d connections to Apache's port, at most %d in its accept queue", samples, most, queued)
	if samples == 0 {
		t.Fatalf("no sample of /proc/%d/net/tcp during the load", r.Pid)
	}
	// Two more than the bound: a TCP health check's connect, and a
	// connection the proxy dials while Apache has yet to see the end of
	// one the proxy closed.
	if most > workers+2 {
		t.Fatalf("%d connections open to the replica at once, Apache having %d workers: requests waited behind connections in its accept queue (at most %d queued)", most, workers, queued)
	}
}

// tcpPort reads the TCP sockets of pid's network namespace: how many
// connections to local port are established (accepted or still in the
// accept queue), and the accept queue of the socket listening on it.
func tcpPort(pid, port int) (conns, backlog int, err error) {
	for _, f := range []string{"tcp", "tcp6"} {
		fh, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return 0, 0, err
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local rem st tx_queue:rx_queue ...
			fs := strings.Fields(sc.Text())
			if len(fs) < 5 {
				continue
			}
			i := strings.LastIndexByte(fs[1], ':')
			lp, err := strconv.ParseUint(fs[1][i+1:], 16, 16)
			if err != nil || int(lp) != port {
				continue
			}
			switch fs[3] {
			case "01": // ESTABLISHED
				conns++
			case "0A": // LISTEN: rx_queue is the accept queue
				_, rx, _ := strings.Cut(fs[4], ":")
				n, _ := strconv.ParseUint(rx, 16, 32)
				backlog += int(n)
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return 0, 0, err
		}
	}
	return conns, backlog, nil
}
