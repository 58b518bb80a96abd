package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// The page needs the token: none or a wrong one is refused; ?token= sets
// an HttpOnly cookie (not the token itself) and sends the browser to the
// same address without it; the cookie and the bearer header both open it.
func TestAuth(t *testing.T) {
	d := newTestDashboard(newFakeDaemon(), clock.NewFake(t0))
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	c := &http.Client{CheckRedirect: noRedirect}
	for _, path := range []string{"/", "/stream", "/static/app.js", "/?token=wrong"} {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || len(resp.Cookies()) != 0 || !strings.Contains(string(body), "?token=") {
			t.Fatalf("GET %s without the token: %d %v %q", path, resp.StatusCode, resp.Cookies(), body)
		}
	}
	resp, err := c.Get(srv.URL + "/?token=sesame&x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?x=1" || len(cookies) != 1 {
		t.Fatalf("GET with the token: %d location %q cookies %v", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
	ck := cookies[0]
	if ck.Name != CookieName || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || strings.Contains(ck.Value, "sesame") {
		t.Fatalf("cookie: %+v", ck)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.AddCookie(&http.Cookie{Name: CookieName, Value: ck.Value})
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET with the cookie: %v %v", resp, err)
	} else {
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Fatalf("Content-Security-Policy %q", csp)
		}
		resp.Body.Close()
	}
	req, _ = http.NewRequest("GET", srv.URL+"/static/style.css", nil)
	req.Header.Set("Authorization", "Bearer sesame")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET with the bearer token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("GET", srv.URL+"/", nil)
	req.AddCookie(&http.Cookie{Name: CookieName, Value: "sesame"})
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("GET with the token as the cookie: %v %v", resp, err)
	}
}

// The page shows the apps, their replicas with their states, revisions with
// their traffic, the job tenants and the latest events, newest first.
func TestPageShowsState(t *testing.T) {
	f := newFakeDaemon()
	f.set([]types.App{{Name: "hello", State: "running", Revision: 2, Traffic: []types.TrafficTarget{{Revision: 1, Percent: 10}, {Revision: 2, Percent: 90}},
		Replicas: []types.Replica{replica("hello-1", "ready", 0.5), {ID: "hello-2", Revision: 2, State: "frozen"}}}}, map[string]route.Load{"hello": {Requests: 5}})
	f.tenants = []Tenant{{Name: "course-a", Queued: 4, Running: 1}}
	f.events = []types.Event{{Seq: 1, Kind: "scale", App: "hello", Reason: "first <b>"}, {Seq: 2, Kind: "freeze", App: "hello", Replica: "hello-2", Reason: "idle"}}
	d := newTestDashboard(f, clock.NewFake(t0))
	d.s.sample(context.Background())
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Authorization", "Bearer sesame")
	d.Handler().ServeHTTP(rec, req)
	page := rec.Body.String()
	for _, want := range []string{
		`data-app="hello" data-state="running"`,
		`data-replica="hello-1" data-state="ready"`,
		`data-replica="hello-2" data-state="frozen"`,
		`<tr data-revision="2">`, `value="90"`, `value="10"`,
		`data-tenant="course-a"><td>course-a</td><td>4</td><td>1</td>`,
		`data-after="2"`, `first &lt;b&gt;`,
		`<polyline class="c1"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for q, code := range map[string]int{"?span=5s": 200, "?span=1h": 400, "?span=x": 400} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/"+q, nil)
		req.Header.Set("Authorization", "Bearer sesame")
		d.Handler().ServeHTTP(rec, req)
		if rec.Code != code {
			t.Errorf("GET /%s: %d, want %d", q, rec.Code, code)
		}
	}
	if i, j := strings.Index(page, `data-seq="2"`), strings.Index(page, `data-seq="1"`); i < 0 || j < i {
		t.Errorf("events not newest first: %d %d", i, j)
	}
	if t.Failed() {
		t.Logf("page:\n%s", page)
	}
}

// sseReader reads server-sent events.
type sseReader struct{ r *bufio.Reader }

func (s sseReader) next(t *testing.T) (id, name, data string) {
	t.Helper()
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && name != "":
			return id, name, data
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			name = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
}

// The stream sends the sections at once, then only those that changed
// after each sample, and each new event as a row with its seq as the id.
func TestStream(t *testing.T) {
	f := newFakeDaemon()
	fc := clock.NewFake(t0)
	f.set([]types.App{{Name: "hello", State: "running", Replicas: []types.Replica{replica("hello-1", "ready", 0.5)}}}, nil)
	d := newTestDashboard(f, fc)
	d.s.sample(context.Background())
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/stream?after=3", nil)
	req.Header.Set("Authorization", "Bearer sesame")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sse := sseReader{bufio.NewReader(resp.Body)}
	_, name, data := sse.next(t)
	var secs map[string]string
	if err := json.Unmarshal([]byte(data), &secs); name != "sections" || err != nil || len(secs) != 4 || secs["certs"] == "" ||
		!strings.Contains(secs["apps"], `data-state="ready"`) {
		t.Fatalf("first message: %s %v %q", name, err, data)
	}

	f.set([]types.App{{Name: "hello", State: "running", Replicas: []types.Replica{replica("hello-1", "frozen", 0.5)}}}, nil)
	fc.Advance(time.Second)
	d.s.sample(context.Background())
	_, name, data = sse.next(t)
	secs = nil
	if err := json.Unmarshal([]byte(data), &secs); name != "sections" || err != nil || secs["apps"] != "" ||
		!strings.Contains(secs["app:hello"], `data-replica="hello-1" data-state="frozen"`) {
		t.Fatalf("after the freeze, only hello's article: %s %v %q", name, err, data)
	}

	// A new app sends the apps section whole.
	f.set([]types.App{{Name: "hello", State: "running", Replicas: []types.Replica{replica("hello-1", "frozen", 0.5)}}, {Name: "new"}}, nil)
	fc.Advance(time.Second)
	d.s.sample(context.Background())
	_, name, data = sse.next(t)
	secs = nil
	if err := json.Unmarshal([]byte(data), &secs); name != "sections" || err != nil || secs["app:new"] != "" ||
		!strings.Contains(secs["apps"], `data-app="hello"`) || !strings.Contains(secs["apps"], `data-app="new"`) {
		t.Fatalf("after a new app: %s %v %q", name, err, data)
	}

	f.watch <- types.Event{Seq: 3, Kind: "old", App: "hello"} // not after 3
	f.watch <- types.Event{Seq: 4, Kind: "thaw", App: "hello", Replica: "hello-1", Reason: "a request came"}
	id, name, data := sse.next(t)
	var ev struct{ HTML, App string }
	if err := json.Unmarshal([]byte(data), &ev); id != "4" || name != "event" || err != nil || ev.App != "hello" ||
		!strings.Contains(ev.HTML, `data-kind="thaw"`) || !strings.Contains(ev.HTML, "a request came") {
		t.Fatalf("event: id %q %s %v %q", id, name, err, data)
	}
}

// A dashboard given no token opens to nobody.
func TestNoTokenOpensNothing(t *testing.T) {
	d := New(Options{Clock: clock.NewFake(t0)})
	for _, set := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") },
		func(r *http.Request) { r.URL.RawQuery = "token=" },
		func(r *http.Request) { r.AddCookie(&http.Cookie{Name: CookieName, Value: ""}) },
	} {
		req := httptest.NewRequest("GET", "/", nil)
		set(req)
		rec := httptest.NewRecorder()
		d.Handler().ServeHTTP(rec, req)
		if rec.Code != 401 {
			t.Fatalf("%v: %d, want 401", req.Header, rec.Code)
		}
	}
}

type fakeNodes []types.Node

func (f fakeNodes) List(context.Context) ([]types.Node, error) { return f, nil }

// In a cluster the page lists the nodes with their state and the leader; on
// a single host it has no nodes section.
func TestNodesInACluster(t *testing.T) {
	get := func(d *Dashboard) string {
		d.s.sample(context.Background())
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("Authorization", "Bearer sesame")
		d.Handler().ServeHTTP(rec, req)
		return rec.Body.String()
	}
	if page := get(newTestDashboard(newFakeDaemon(), clock.NewFake(t0))); strings.Contains(page, `id="nodes"`) {
		t.Fatal("a single host's page has a nodes section")
	}
	nodes := fakeNodes{{Name: "n1", Addr: "10.0.0.11:7070", State: "ready", Leader: true, CPUs: 2, Memory: 4 << 30},
		{Name: "n2", Addr: "10.0.0.12:7070", State: "down", Health: "lease expired"}}
	d := New(Options{Nodes: nodes, Token: "sesame", Clock: clock.NewFake(t0), History: 5})
	page := get(d)
	for _, want := range []string{`id="nodes"`, `data-node="n1" data-state="ready"`, `<b>n1</b> <span class="muted">leader</span>`,
		`data-node="n2" data-state="down"`, `lease expired`, `4.0 GiB`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	snap, _ := d.s.snapshot()
	r, err := d.render.get(snap, 5*time.Second)
	if err != nil || !strings.Contains(r.sections["nodes"], `data-node="n2"`) {
		t.Fatalf("the stream's nodes section: %v %q", err, r.sections["nodes"])
	}
}

type fakeCerts []types.Cert

func (f fakeCerts) List(context.Context) ([]types.Cert, error) { return f, nil }

// The page lists the certificates with their expiry and last error, and
// the stream carries that section.
func TestCertsSection(t *testing.T) {
	get := func(d *Dashboard) string {
		d.s.sample(context.Background())
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("Authorization", "Bearer sesame")
		d.Handler().ServeHTTP(rec, req)
		return rec.Body.String()
	}
	if page := get(newTestDashboard(newFakeDaemon(), clock.NewFake(t0))); !strings.Contains(page, "No certificate") {
		t.Fatal("a page without certificates does not say so")
	}
	certs := fakeCerts{{Domains: []string{"www.example.test", "example.test"}, Source: "file", Issuer: "Test CA", NotAfter: t0.Add(90 * 24 * time.Hour)},
		{Domains: []string{"shop.example.test"}, Source: "acme", Pending: true, LastError: "rate limited"}}
	d := New(Options{Certs: certs, Token: "sesame", Clock: clock.NewFake(t0), History: 5})
	page := get(d)
	for _, want := range []string{`id="certs"`, `data-cert="www.example.test"`, `<code>example.test</code>`, "Test CA",
		t0.Add(90 * 24 * time.Hour).UTC().Format("2006-01-02 15:04"), `data-cert="shop.example.test"`, "pending", "rate limited"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	snap, _ := d.s.snapshot()
	r, err := d.render.get(snap, 5*time.Second)
	if err != nil || !strings.Contains(r.sections["certs"], "rate limited") {
		t.Fatalf("the stream's certs section: %v %q", err, r.sections["certs"])
	}
}
