package proxy

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shoal-run/shoal/internal/httperr"
	"github.com/shoal-run/shoal/internal/route"
)

// backend is a replica: an httptest server on loopback that counts requests.
type backend struct {
	srv  *httptest.Server
	addr string
	hits atomic.Int64
}

func newBackend(t *testing.T, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(b.srv.Close)
	b.addr = strings.TrimPrefix(b.srv.URL, "http://")
	return b
}

// namedBackend answers its name.
func namedBackend(t *testing.T, name string) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, name)
	})
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

type front struct {
	p      *Proxy
	addr   string // host:port of the proxy's listener
	url    string
	client *http.Client
}

func newFront(t *testing.T, o Options) *front {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := New(o)
	addr := serveProxy(t, p)
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &front{p: p, addr: addr, url: "http://" + addr, client: &http.Client{Transport: tr}}
}

// serveProxy runs p.Serve on a loopback listener until the test ends and
// returns its address.
func serveProxy(t testing.TB, p *Proxy) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-done; err != http.ErrServerClosed {
			t.Errorf("Serve returned %v", err)
		}
	})
	return l.Addr().String()
}

func (f *front) req(t *testing.T, method, host, path string, body io.Reader) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, f.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	r.Host = host
	return r
}

// get sends GET path to host and returns status and body.
func (f *front) get(t *testing.T, host, path string) (int, string, http.Header) {
	t.Helper()
	return f.do(t, f.req(t, "GET", host, path, nil))
}

func (f *front) do(t *testing.T, r *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := f.client.Do(r)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", r.Method, r.URL.Path, r.Host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func routeTo(app string, bs ...*backend) route.Route {
	r := route.Route{App: app}
	for i, b := range bs {
		r.Endpoints = append(r.Endpoints, route.Endpoint{ID: app + "-" + string(rune('a'+i)), Addr: b.addr})
	}
	return r
}

// apiError decodes a JSON error body.
func apiError(t *testing.T, body string) httperr.Body {
	t.Helper()
	var e httperr.Body
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body is not JSON: %q: %v", body, err)
	}
	if e.Error == "" {
		t.Fatalf("error body has no error: %q", body)
	}
	return e
}

// eventually polls cond until it holds; it fails the test after a generous
// deadline (a hang guard, not a timing assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// recv receives from ch or fails the test after a hang guard.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(60 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// result is the outcome of a request sent in a goroutine.
type result struct {
	code   int
	body   string
	header http.Header
	err    error
}

func (f *front) goDo(r *http.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := f.client.Do(r)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- result{code: resp.StatusCode, body: string(b), header: resp.Header, err: err}
	}()
	return ch
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// collectCount counts the series a collector has.
func collectCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 1000)
	c.Collect(ch)
	close(ch)
	return len(ch)
}
