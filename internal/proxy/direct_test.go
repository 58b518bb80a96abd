package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestReusedConnectionClosedByReplica(t *testing.T) {
	f := newFront(t, Options{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Method, body)
	})
	f.p.SetRoute(routeTo("a", b))
	for i := range 5 {
		// The replica drops its keep-alive connections between requests, as
		// one that restarted or timed them out would.
		b.srv.CloseClientConnections()
		if code, body, _ := f.get(t, "a.localhost", "/"); code != 200 || body != "GET " {
			t.Fatalf("GET %d on a closed keep-alive connection: %d %q", i, code, body)
		}
		b.srv.CloseClientConnections()
		code, body, _ := f.do(t, f.req(t, "POST", "a.localhost", "/", strings.NewReader("data")))
		if code != 200 || body != "POST data" {
			t.Fatalf("POST %d on a closed keep-alive connection: %d %q", i, code, body)
		}
	}
}

func TestReplicaCutsAnswerShort(t *testing.T) {
	f := newFront(t, Options{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
		brw.Flush()
		conn.Close()
	})
	f.p.SetRoute(routeTo("a", b))
	resp, err := f.client.Do(f.req(t, "GET", "a.localhost", "/", nil))
	if err != nil {
		return // the proxy aborted the connection: fine
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("a cut answer reached the client as a whole one")
	}
}

func TestHeadNoContentAndHeaders(t *testing.T) {
	f := newFront(t, Options{})
	var got http.Header
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("X-App", "yes")
		w.Header().Set("Keep-Alive", "timeout=5")
		switch r.URL.Path {
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		}
	})
	f.p.SetRoute(routeTo("a", b))
	for range 3 {
		code, body, h := f.do(t, f.req(t, "HEAD", "a.localhost", "/", nil))
		if code != 200 || body != "" || h.Get("Content-Length") != "5" || h.Get("X-App") != "yes" {
			t.Fatalf("HEAD: %d %q %v", code, body, h)
		}
		if h.Get("Keep-Alive") != "" {
			t.Fatalf("hop-by-hop answer header passed: %v", h)
		}
		if code, body, _ := f.get(t, "a.localhost", "/empty"); code != 204 || body != "" {
			t.Fatalf("204: %d %q", code, body)
		}
	}
	r := f.req(t, "GET", "a.localhost", "/?q=1&r=%2F", nil)
	r.Header.Set("Connection", "X-Secret")
	r.Header.Set("X-Secret", "hop")
	r.Header.Set("X-Kept", "end")
	if code, body, _ := f.do(t, r); code != 200 || body != "hello" {
		t.Fatalf("GET: %d %q", code, body)
	}
	if got.Get("X-Secret") != "" || got.Get("X-Kept") != "end" {
		t.Fatalf("headers at the replica: %v", got)
	}
}

func TestClientGoneWhileReplicaThinks(t *testing.T) {
	f := newFront(t, Options{})
	started := make(chan struct{}, 1)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	})
	f.p.SetRoute(routeTo("a", b))
	ctx, cancel := context.WithCancel(context.Background())
	done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil).WithContext(ctx))
	recv(t, started, "the request at the replica")
	cancel()
	if r := recv(t, done, "the canceled request"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled request: %+v", r)
	}
	// The proxy stops waiting for the replica: the request leaves the
	// in-flight count and the endpoint becomes idle.
	if err := f.p.WaitIdle(context.Background(), "a-a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "in-flight to drop", func() bool { return f.p.Load("a").InFlight == 0 })
}
