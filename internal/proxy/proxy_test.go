package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/route"
)

func TestRoutingByHost(t *testing.T) {
	f := newFront(t, Options{Domain: "Apps.Example.Test"})
	a := namedBackend(t, "a")
	var seen http.Header
	var seenHost string
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		seen, seenHost = r.Header.Clone(), r.Host
		io.WriteString(w, "b")
	})
	f.p.Update([]route.Route{routeTo("a", a), routeTo("B", b)})

	for _, tc := range []struct{ host, want string }{
		{"a.localhost", "a"},
		{"a.localhost:8080", "a"},
		{"A.LocalHost:8080", "a"},
		{"a.localhost.", "a"},
		{"b.localhost", "b"},
		{"b.apps.example.test", "b"},
		{"B.APPS.EXAMPLE.TEST:443", "b"},
	} {
		code, body, _ := f.get(t, tc.host, "/")
		if code != 200 || body != tc.want {
			t.Errorf("Host %s: %d %q, want 200 %q", tc.host, code, body, tc.want)
		}
	}
	for _, host := range []string{"c.localhost", "localhost", "a.example.test", "127.0.0.1", "x.a.localhost"} {
		code, body, h := f.get(t, host, "/")
		if code != 404 {
			t.Errorf("Host %s: %d, want 404", host, code)
			continue
		}
		if e := apiError(t, body); e.Field != "host" {
			t.Errorf("Host %s: field %q, want host", host, e.Field)
		}
		if ct := h.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Host %s: Content-Type %q", host, ct)
		}
	}

	r := f.req(t, "GET", "b.localhost:8080", "/x", nil)
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	r.Header.Set("X-Forwarded-Proto", "https")
	if code, _, _ := f.do(t, r); code != 200 {
		t.Fatalf("status %d", code)
	}
	// From a peer that is not a trusted proxy: replaced.
	if got := seen.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q", got)
	}
	if got := seen.Get("X-Forwarded-Host"); got != "b.localhost:8080" {
		t.Errorf("X-Forwarded-Host = %q", got)
	}
	if got := seen.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto = %q", got)
	}
	if seenHost != "b.localhost:8080" {
		t.Errorf("Host at the replica = %q", seenHost)
	}

	f.p.RemoveRoute("b")
	if code, _, _ := f.get(t, "b.localhost", "/"); code != 404 {
		t.Errorf("removed app: %d, want 404", code)
	}
	if code, _, _ := f.get(t, "a.localhost", "/"); code != 200 {
		t.Errorf("remaining app: %d, want 200", code)
	}
}

func TestUnavailable(t *testing.T) {
	f := newFront(t, Options{})
	r := routeTo("a", namedBackend(t, "a"))
	r.Unavailable = "app is being deleted"
	f.p.SetRoute(r)
	code, body, _ := f.get(t, "a.localhost", "/")
	if code != 503 || !strings.Contains(apiError(t, body).Error, "app is being deleted") {
		t.Fatalf("got %d %q, want 503 with the reason", code, body)
	}
}

func TestP2CSpreadsLoad(t *testing.T) {
	f := newFront(t, Options{})
	bs := []*backend{namedBackend(t, "0"), namedBackend(t, "1"), namedBackend(t, "2")}
	f.p.SetRoute(routeTo("a", bs...))
	const n = 300
	for range n {
		if code, _, _ := f.get(t, "a.localhost", "/"); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	for i, b := range bs {
		if h := b.hits.Load(); h < n/10 {
			t.Errorf("backend %d got %d of %d requests", i, h, n)
		}
	}
	st := f.p.Load("a")
	if st.Requests != n || st.InFlight != 0 || len(st.Endpoints) != 3 {
		t.Errorf("stats %+v", st)
	}
	var sum uint64
	for _, e := range st.Endpoints {
		sum += e.Requests
	}
	if sum != n {
		t.Errorf("endpoint requests sum to %d, want %d", sum, n)
	}
}

func TestP2CPrefersLessLoaded(t *testing.T) {
	f := newFront(t, Options{})
	hold := make(chan struct{})
	held := make(chan string, 1)
	mk := func(name string) *backend {
		return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				held <- name
				<-hold
			}
			io.WriteString(w, name)
		})
	}
	f.p.SetRoute(routeTo("a", mk("x"), mk("y")))
	done := f.goDo(f.req(t, "GET", "a.localhost", "/hold", nil))
	busy := recv(t, held, "the held request")
	// With two endpoints both are drawn; the idle one always wins.
	for range 50 {
		_, body, _ := f.get(t, "a.localhost", "/")
		if body == busy {
			t.Fatalf("request went to %s, which has a request in flight", busy)
		}
	}
	close(hold)
	if r := recv(t, done, "held answer"); r.err != nil || r.code != 200 {
		t.Fatalf("held request: %+v", r)
	}
}

func TestRetryOnDeadEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFront(t, Options{Registerer: reg})
	live := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "live:%s", b)
	})
	f.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{
		{ID: "dead1", Addr: deadAddr(t)},
		{ID: "live", Addr: live.addr},
		{ID: "dead2", Addr: deadAddr(t)},
	}})
	for i := range 30 {
		var body io.Reader
		method := "GET"
		if i%2 == 1 {
			method, body = "POST", strings.NewReader("payload")
		}
		code, got, _ := f.do(t, f.req(t, method, "a.localhost", "/", body))
		want := "live:"
		if body != nil {
			want = "live:payload"
		}
		if code != 200 || got != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, code, got, want)
		}
	}
	if n := counterValue(f.p.metrics.retries.WithLabelValues("a")); n == 0 {
		t.Error("no retry counted")
	}
	for id, e := range f.p.Load("a").Endpoints {
		if e.InFlight != 0 {
			t.Errorf("endpoint %s has %d in flight", id, e.InFlight)
		}
	}

	f.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "dead1", Addr: deadAddr(t)}, {ID: "dead2", Addr: deadAddr(t)}}})
	code, body, _ := f.get(t, "a.localhost", "/")
	if code != 502 {
		t.Fatalf("all dead: %d %q, want 502", code, body)
	}
	apiError(t, body)
}

func TestBodyLimit(t *testing.T) {
	f := newFront(t, Options{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		fmt.Fprint(w, n)
	})
	r := routeTo("a", b)
	r.MaxBodyBytes = 100
	f.p.SetRoute(r)

	code, body, _ := f.do(t, f.req(t, "POST", "a.localhost", "/", strings.NewReader(strings.Repeat("x", 100))))
	if code != 200 || body != "100" {
		t.Fatalf("body at the limit: %d %q", code, body)
	}
	code, body, _ = f.do(t, f.req(t, "POST", "a.localhost", "/", strings.NewReader(strings.Repeat("x", 101))))
	if code != 413 || apiError(t, body).Field != "body" {
		t.Fatalf("body over the limit: %d %q, want 413", code, body)
	}
	// A chunked body of unknown length is cut at the limit.
	req := f.req(t, "POST", "a.localhost", "/", io.MultiReader(strings.NewReader(strings.Repeat("y", 4000))))
	req.ContentLength = -1
	code, body, _ = f.do(t, req)
	if code != 413 {
		t.Fatalf("chunked body over the limit: %d %q, want 413", code, body)
	}
	req = f.req(t, "POST", "a.localhost", "/", io.MultiReader(strings.NewReader("small")))
	req.ContentLength = -1
	if code, body, _ = f.do(t, req); code != 200 || body != "5" {
		t.Fatalf("small chunked body: %d %q", code, body)
	}
}

func TestStreamingFlushes(t *testing.T) {
	f := newFront(t, Options{})
	next := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "chunk%d\n", i)
			w.(http.Flusher).Flush()
			<-next // the next chunk is written only after the client saw this one
		}
	})
	f.p.SetRoute(routeTo("a", b))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := f.req(t, "GET", "a.localhost", "/", nil).WithContext(ctx)
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line := make(chan string, 1)
		go func() { l, _ := br.ReadString('\n'); line <- l }()
		if got := recv(t, line, "a streamed chunk"); got != fmt.Sprintf("chunk%d\n", i) {
			t.Fatalf("chunk %d = %q", i, got)
		}
		next <- struct{}{}
	}
}

func TestUpgradePassesThrough(t *testing.T) {
	f := newFront(t, Options{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw) // echo until the client closes
	})
	f.p.SetRoute(routeTo("a", b))

	conn, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /ws HTTP/1.1\r\nHost: a.localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "echo" {
		t.Fatalf("upgrade answer %d %v", resp.StatusCode, resp.Header)
	}
	for _, msg := range []string{"hello\n", "over the upgraded connection\n"} {
		fmt.Fprint(conn, msg)
		got := make(chan string, 1)
		go func() { l, _ := br.ReadString('\n'); got <- l }()
		if g := recv(t, got, "the echo"); g != msg {
			t.Fatalf("echo %q, want %q", g, msg)
		}
	}
	if st := f.p.Load("a"); st.InFlight != 1 {
		t.Errorf("an open upgraded connection counts as in flight: %+v", st)
	}
	conn.Close()
	eventually(t, "the upgraded connection to end", func() bool { return f.p.Load("a").InFlight == 0 })
}

func TestMetricsExposed(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFront(t, Options{Registerer: reg})
	f.p.SetRoute(routeTo("a", namedBackend(t, "a")))
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.get(t, "a.localhost", "/")
		}()
	}
	wg.Wait()
	f.get(t, "nope.localhost", "/")
	if n := counterValue(f.p.metrics.requests.WithLabelValues("a", "200")); n != 5 {
		t.Errorf("requests_total{app=a,code=200} = %v, want 5", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetName() != "app" || m.GetLabel()[0].GetValue() != "a" {
				t.Errorf("%s has labels %v", mf.GetName(), m.GetLabel())
			}
		}
	}
	for _, want := range []string{"requests_total", "in_flight", "queued", "endpoints", "request_duration_seconds", "activation_wait_seconds", "added_latency_seconds", "first_byte_seconds", "retries_total", "cold_starts_total"} {
		if !names["shoal_proxy_"+want] {
			t.Errorf("metric shoal_proxy_%s not exposed (have %v)", want, names)
		}
	}
	f.p.RemoveRoute("a")
	if n := collectCount(f.p.metrics.requests); n != 0 {
		t.Errorf("a removed app keeps %d request series", n)
	}
}
