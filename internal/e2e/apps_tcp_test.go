package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// A TCP route on real containers: hello (an HTTP server, spoken to here as
// bytes) with protocol = "tcp" scaled to zero; a connection to its listen
// port starts a replica and is relayed to it, counts in flight while open,
// and an HTTP request for the app through the proxy is refused naming the
// port.
func TestTCPRouteWakesApp(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	port := freePort(t)
	d.deploy(fmt.Sprintf(`
name = "hello"
image = "hello:1"
port = 8080
protocol = "tcp"
listen = %d
[scale]
min = 0
max = 2
`, port))
	if a := d.app("hello"); len(a.Replicas) != 0 {
		t.Fatalf("a fresh app with min 0 has replicas: %+v", a)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var c net.Conn
	var err error
	// The proxy binds the port once the route reaches it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err = net.DialTimeout("tcp", addr, 5*time.Second); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the TCP route's port %s: %v", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: anything\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("through the TCP route: %v", err)
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<10))
	if res.StatusCode != 200 || !strings.HasPrefix(string(body), "hello from ") {
		t.Fatalf("through the TCP route: %d %q", res.StatusCode, body)
	}
	// The open connection is in flight on its replica.
	d.waitApp("hello", "the open connection counted", func(a types.App) bool {
		return len(a.Replicas) == 1 && a.Replicas[0].InFlight == 1
	})
	code, body2, _ := get(t, d.proxyAddr(), "hello", "/")
	if code != 404 || !strings.Contains(body2, "takes TCP connections on port "+strconv.Itoa(port)) {
		t.Fatalf("HTTP for a TCP app: %d %s", code, body2)
	}
	c.Close()
	d.waitApp("hello", "the closed connection uncounted", func(a types.App) bool {
		return len(a.Replicas) == 1 && a.Replicas[0].InFlight == 0
	})
}
