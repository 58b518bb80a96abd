package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// benchGet sends b.N GETs in parallel through client to url with host.
func benchGet(b *testing.B, client *http.Client, url, host string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = host
		for pb.Next() {
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}

func benchSetup(b *testing.B) (backendURL, proxyURL string, client *http.Client) {
	body := strings.Repeat("x", 128)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, body)
	}))
	b.Cleanup(be.Close)
	p := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a1", Addr: strings.TrimPrefix(be.URL, "http://")}}})
	fr := httptest.NewServer(p)
	b.Cleanup(fr.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return be.URL, fr.URL, &http.Client{Transport: tr}
}

// benchProxy is a proxy that logs nothing, routing app a, and domains, to
// the backend of benchSetup.
func benchProxy(b *testing.B, domains ...string) *Proxy {
	be, _, _ := benchSetup(b)
	p := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	p.SetRoute(route.Route{App: "a", Domains: domains, Endpoints: []route.Endpoint{{ID: "a1", Addr: strings.TrimPrefix(be, "http://")}}})
	return p
}

// BenchmarkDirect is the baseline: a client straight to the backend.
func BenchmarkDirect(b *testing.B) {
	be, _, client := benchSetup(b)
	benchGet(b, client, be+"/", "a.localhost")
}

// BenchmarkProxy sends the same requests through the proxy; the difference
// to BenchmarkDirect is the proxy's overhead per request.
func BenchmarkProxy(b *testing.B) {
	_, fr, client := benchSetup(b)
	benchGet(b, client, fr+"/", "a.localhost")
}

// BenchmarkServeHTTP measures the proxy's own handler with an in-memory
// response writer, the backend on loopback.
func BenchmarkServeHTTP(b *testing.B) {
	p := benchProxy(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest("GET", "http://a.localhost/", nil)
		for pb.Next() {
			w := httptest.NewRecorder()
			p.ServeHTTP(w, req)
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
}

// BenchmarkServe sends b.N GETs through the proxy's own front end on
// kept-alive connections from a client that allocates nothing, so that
// allocations reported are the proxy's and the backend's.
func BenchmarkServe(b *testing.B) {
	p := benchProxy(b)
	benchServeAt(b, serveProxy(b, p))
}

// BenchmarkServeHop is BenchmarkServe with the replica on another node:
// the request goes through this node's proxy and, by a hop, through the
// replica's node's proxy (both on loopback).
func BenchmarkServeHop(b *testing.B) {
	be, _, _ := benchSetup(b)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p1, p2 := New(Options{Logger: quiet}), New(Options{Logger: quiet})
	p1.SetHop("n1", []byte("bench key"))
	p2.SetHop("n2", []byte("bench key"))
	p2.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a1", Addr: strings.TrimPrefix(be, "http://"), Node: "n2"}}})
	p1.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a1", Addr: serveProxy(b, p2), Node: "n2"}}})
	benchServeAt(b, serveProxy(b, p1))
}

// benchServeAt sends b.N GETs to the proxy at addr on kept-alive
// connections from a client that allocates nothing.
func benchServeAt(b *testing.B, addr string) {
	benchKeptAlive(b, func() (net.Conn, error) { return net.Dial("tcp", addr) }, "a.localhost")
}

// benchKeptAlive sends b.N GETs for host in parallel, on kept-alive
// connections that dial opens, from a client that allocates nothing.
func benchKeptAlive(b *testing.B, dial func() (net.Conn, error), host string) {
	req := []byte("GET / HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: bench\r\n\r\n")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c, err := dial()
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			if err := skipAnswer(br); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// skipAnswer reads one answer with a Content-Length.
func skipAnswer(br *bufio.Reader) error {
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if n < 0 {
		return errors.New("answer without Content-Length")
	}
	_, err := br.Discard(n)
	return err
}

// benchPick measures choosing an endpoint for a request of route r.
func benchPick(b *testing.B, r route.Route) {
	p := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	p.SetRoute(r)
	a := (*p.apps.Load())[r.App]
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e := a.pick(nil)
			if e == nil {
				b.Fatal("no endpoint")
			}
			e.done()
		}
	})
}

func pickRoute(n int) route.Route {
	r := route.Route{App: "a"}
	for i := range n {
		r.Endpoints = append(r.Endpoints, route.Endpoint{ID: "a" + strconv.Itoa(i), Addr: "127.0.0.1:1", Revision: 1 + i%2})
	}
	return r
}

// BenchmarkPick is the choice of an endpoint among 8 without weights.
func BenchmarkPick(b *testing.B) { benchPick(b, pickRoute(8)) }

// BenchmarkPickSplit is the same choice in a route split 90/10 between two
// revisions.
func BenchmarkPickSplit(b *testing.B) {
	r := pickRoute(8)
	r.Weights = map[int]int{1: 90, 2: 10}
	benchPick(b, r)
}
