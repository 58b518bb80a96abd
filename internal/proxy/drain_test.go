package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// An upgraded connection holds its endpoint's drain until the drain's grace
// is over (its context ends); then both its connections close, and the
// endpoint has nothing in flight.
func TestDrainGraceCutsUpgrade(t *testing.T) {
	f := newFront(t, Options{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw)
	})
	f.p.SetRoute(routeTo("a", b))
	conn, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /ws HTTP/1.1\r\nHost: a.localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	lines := make(chan string)
	go func() {
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
		}
	}()
	f.p.SetRoute(route.Route{App: "a"}) // the endpoint leaves the route and drains
	ctx, graceOver := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- f.p.WaitIdle(ctx, "a-a") }()
	fmt.Fprint(conn, "still open\n")
	if got := recv(t, lines, "the echo during the drain"); got != "still open\n" {
		t.Fatalf("echo during the drain: %q", got)
	}
	select {
	case err := <-waited:
		t.Fatalf("WaitIdle returned (%v) with an upgraded connection open", err)
	default:
	}
	graceOver()
	if err := recv(t, waited, "WaitIdle"); err == nil {
		t.Fatal("WaitIdle cut short returned no error")
	}
	if l := recv(t, lines, "the client's connection to close"); l != "" {
		t.Fatalf("the client's connection carried %q after the cut, want it closed", l)
	}
	eventually(t, "nothing in flight", func() bool { return f.p.Load("a").InFlight == 0 })
}
