package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// A small body that arrives after the head is read into the buffer the
// head was in; the sticky cookie must still be honoured.
func TestStickyCookieWithLateBody(t *testing.T) {
	f := newFront(t, Options{})
	var eps []route.Endpoint
	for _, id := range []string{"a-1", "a-2", "a-3", "a-4"} {
		eps = append(eps, route.Endpoint{ID: id, Addr: namedBackend(t, id).addr, Revision: 1})
	}
	f.p.SetRoute(route.Route{App: "a", Sticky: true, Endpoints: eps})
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := strings.Repeat("x", 4000)
	head := "POST / HTTP/1.1\r\nCookie: " + route.StickyCookie + "=a-3\r\nHost: a.localhost\r\nContent-Length: 4000\r\n\r\n"
	br := bufio.NewReader(c)
	for i := range 3 {
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the head is read alone
		if _, err := c.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("request %d: body: %v", i, err)
		}
		if resp.StatusCode != 200 || string(got) != "a-3" || resp.Header.Get("Set-Cookie") != "" {
			t.Fatalf("request %d: %d from %q, Set-Cookie %q; want a-3 and no new cookie", i, resp.StatusCode, got, resp.Header.Get("Set-Cookie"))
		}
	}
}

// A request held for a cold app whose body was not read yet (over the
// inline size) is refused when the app goes away; the connection skips the
// body and serves the next request.
func TestRefusedHeldRequestSkipsItsBody(t *testing.T) {
	f := newFront(t, Options{Activator: newActivator(), Clock: clock.NewFake(time.Unix(0, 0))})
	f.p.SetRoute(coldRoute("a"))
	f.p.SetRoute(routeTo("b", namedBackend(t, "b")))
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = inlineBody + 4000
	head := "POST / HTTP/1.1\r\nHost: a.localhost\r\nContent-Length: " + strconv.Itoa(n) + "\r\n\r\n"
	// The first inlineBody bytes are read before the request queues.
	if _, err := c.Write([]byte(head + strings.Repeat("x", inlineBody))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the request to queue", func() bool { return f.p.Load("a").Queued == 1 })
	if _, err := c.Write([]byte(strings.Repeat("x", n-inlineBody))); err != nil {
		t.Fatal(err)
	}
	f.p.RemoveRoute("a")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("held request of a removed app: %d", resp.StatusCode)
	}
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: b.localhost\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("next request on the connection: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "b" {
		t.Fatalf("next request on the connection: %d %q", resp.StatusCode, body)
	}
}
