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

// An upgrade whose first endpoint refused the connect and that went to
// another endpoint is held by that one: its drain's end cuts it.
func TestDrainGraceCutsUpgradeOnTheEndpointItWentTo(t *testing.T) {
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
	f.p.SetRoute(routeTo("a", &backend{addr: deadAddr(t)}, b)) // a-a refuses, a-b answers
	retries := f.p.metrics.retries.WithLabelValues("a")
	var conn net.Conn
	var br *bufio.Reader
	// The endpoint is picked at random: upgrade until one went to a-b
	// after a-a refused it.
	for i := 0; i < 200 && conn == nil; i++ {
		before := counterValue(retries)
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: a.localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		r := bufio.NewReader(c)
		if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		if counterValue(retries) > before {
			conn, br = c, r
		} else {
			c.Close()
		}
	}
	if conn == nil {
		t.Fatal("no upgrade went to a-b after a-a refused it")
	}
	defer conn.Close()
	fmt.Fprint(conn, "open\n")
	if l, err := br.ReadString('\n'); err != nil || l != "open\n" {
		t.Fatalf("echo: %q %v", l, err)
	}
	f.p.SetRoute(route.Route{App: "a"})
	ctx, graceOver := context.WithCancel(context.Background())
	graceOver()
	if err := f.p.WaitIdle(ctx, "a-b"); err == nil {
		t.Fatal("WaitIdle with its grace over returned no error")
	}
	ended := make(chan error, 1)
	go func() {
		_, err := br.ReadString('\n')
		ended <- err
	}()
	if err := recv(t, ended, "the upgraded connection to close"); err == nil {
		t.Fatal("the upgraded connection carried a line after the cut")
	}
	eventually(t, "nothing in flight", func() bool { return f.p.Load("a").InFlight == 0 })
}
