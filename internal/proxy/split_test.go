package proxy

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// fronts returns the proxy's two front ends as base URLs: its own server
// (Serve) and its http.Handler behind net/http.
func fronts(t *testing.T, f *front) map[string]string {
	t.Helper()
	h := httptest.NewServer(f.p)
	t.Cleanup(h.Close)
	return map[string]string{"serve": f.url, "handler": h.URL}
}

// send sends method to base with Host a.localhost and the given Cookie
// header (none when empty) and returns status, body and Set-Cookie.
func send(t *testing.T, f *front, base, method, cookie string, body io.Reader) (int, string, string) {
	t.Helper()
	r, err := http.NewRequest(method, base+"/", body)
	if err != nil {
		t.Fatal(err)
	}
	r.Host = "a.localhost"
	if cookie != "" {
		r.Header.Set("Cookie", cookie)
	}
	code, got, h := f.do(t, r)
	return code, got, h.Get("Set-Cookie")
}

// withinBinomial fails the test when got of n draws is more than five
// standard deviations away from share p: a bound that does not flake.
func withinBinomial(t *testing.T, what string, got, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sigma := math.Sqrt(float64(n) * p * (1 - p))
	if d := math.Abs(float64(got) - mean); d > 5*sigma {
		t.Errorf("%s got %d of %d requests, want %.0f ± %.0f", what, got, n, mean, 5*sigma)
	}
}

func TestWeightedSplit(t *testing.T) {
	f := newFront(t, Options{})
	// Revision 3 has two replicas, revision 4 one: the weights are per
	// revision, not per replica.
	old1, old2, canary := namedBackend(t, "3"), namedBackend(t, "3"), namedBackend(t, "4")
	f.p.SetRoute(route.Route{App: "a", Weights: map[int]int{3: 90, 4: 10}, Endpoints: []route.Endpoint{
		{ID: "a-1", Addr: old1.addr, Revision: 3},
		{ID: "a-2", Addr: old2.addr, Revision: 3},
		{ID: "a-3", Addr: canary.addr, Revision: 4},
	}})
	for name, base := range fronts(t, f) {
		t.Run(name, func(t *testing.T) {
			const n = 2000
			got := map[string]int{}
			for range n {
				code, body, cookie := send(t, f, base, "GET", "", nil)
				if code != 200 {
					t.Fatalf("status %d: %s", code, body)
				}
				if cookie != "" {
					t.Fatalf("a route that is not sticky set a cookie: %q", cookie)
				}
				got[body]++
			}
			withinBinomial(t, "revision 4 (weight 10)", got["4"], n, 0.10)
			withinBinomial(t, "revision 3 (weight 90)", got["3"], n, 0.90)
		})
	}
	if old1.hits.Load() == 0 || old2.hits.Load() == 0 {
		t.Errorf("one replica of revision 3 got nothing: %d and %d", old1.hits.Load(), old2.hits.Load())
	}
}

func TestZeroWeightGetsNothing(t *testing.T) {
	f := newFront(t, Options{})
	b3, b4, b5 := namedBackend(t, "3"), namedBackend(t, "4"), namedBackend(t, "5")
	// Revision 4 has weight 0 and revision 5 none: both get nothing.
	f.p.SetRoute(route.Route{App: "a", Weights: map[int]int{3: 100, 4: 0}, Endpoints: []route.Endpoint{
		{ID: "a-3", Addr: b3.addr, Revision: 3},
		{ID: "a-4", Addr: b4.addr, Revision: 4},
		{ID: "a-5", Addr: b5.addr, Revision: 5},
	}})
	for range 200 {
		if code, body, _ := send(t, f, f.url, "GET", "", nil); code != 200 || body != "3" {
			t.Fatalf("got %d %q, want 200 from revision 3", code, body)
		}
	}
	if b4.hits.Load() != 0 || b5.hits.Load() != 0 {
		t.Errorf("revisions without weight got %d and %d requests", b4.hits.Load(), b5.hits.Load())
	}
}

func TestWeightedRevisionWithoutEndpoints(t *testing.T) {
	f := newFront(t, Options{})
	b3, b4 := namedBackend(t, "3"), namedBackend(t, "4")
	eps := []route.Endpoint{{ID: "a-3", Addr: b3.addr, Revision: 3}, {ID: "a-4", Addr: b4.addr, Revision: 4}}

	// Revision 5 has weight but no replica: revision 3 takes all that has
	// weight (renormalised), revision 4 still nothing.
	f.p.SetRoute(route.Route{App: "a", Weights: map[int]int{3: 20, 5: 80}, Endpoints: eps})
	for range 100 {
		if code, body, _ := send(t, f, f.url, "GET", "", nil); code != 200 || body != "3" {
			t.Fatalf("got %d %q, want 200 from revision 3", code, body)
		}
	}

	// No revision with weight has a replica: every replica serves.
	f.p.SetRoute(route.Route{App: "a", Weights: map[int]int{5: 100}, Endpoints: eps})
	b3.hits.Store(0)
	const n = 200
	for range n {
		if code, body, _ := send(t, f, f.url, "GET", "", nil); code != 200 {
			t.Fatalf("got %d %q with no weighted replica", code, body)
		}
	}
	withinBinomial(t, "revision 3 of two unweighted", int(b3.hits.Load()), n, 0.5)
}

// stuckTo returns the endpoint a Set-Cookie value names, checking its form.
func stuckTo(t *testing.T, setCookie string) string {
	t.Helper()
	v, ok := strings.CutPrefix(setCookie, route.StickyCookie+"=")
	id, ok2 := strings.CutSuffix(v, "; Path=/; HttpOnly")
	if !ok || !ok2 || id == "" {
		t.Fatalf("Set-Cookie %q, want %s=<id>; Path=/; HttpOnly", setCookie, route.StickyCookie)
	}
	return id
}

func TestStickySessions(t *testing.T) {
	f := newFront(t, Options{})
	bs := map[string]*backend{}
	var eps []route.Endpoint
	add := func(id string, rev int) {
		bs[id] = namedBackend(t, id)
		eps = append(eps, route.Endpoint{ID: id, Addr: bs[id].addr, Revision: rev})
	}
	without := func(id string) []route.Endpoint {
		var out []route.Endpoint
		for _, e := range eps {
			if e.ID != id {
				out = append(out, e)
			}
		}
		return out
	}
	set := func() {
		f.p.SetRoute(route.Route{App: "a", Sticky: true, Weights: map[int]int{1: 100}, Endpoints: eps})
	}
	for _, id := range []string{"a-1", "a-2", "a-3"} {
		add(id, 1)
	}
	set()
	for name, base := range fronts(t, f) {
		t.Run(name, func(t *testing.T) {
			code, body, sc := send(t, f, base, "GET", "", nil)
			if code != 200 {
				t.Fatalf("status %d", code)
			}
			id := stuckTo(t, sc)
			if body != id {
				t.Fatalf("answered by %q, cookie names %q", body, id)
			}
			cookie := "theme=dark; " + route.StickyCookie + "=" + id + "; lang=en"
			// Other replicas come and go; the client stays.
			for i := range 30 {
				switch i {
				case 5:
					add(fmt.Sprintf("%s-new-%d", name, i), 1)
					set()
				case 10:
					for _, e := range eps {
						if e.ID != id {
							eps = without(e.ID)
							break
						}
					}
					set()
				case 15:
					// A revision without weight: a cookie still counts.
					add(fmt.Sprintf("%s-old-%d", name, i), 7)
					set()
				}
				code, body, sc := send(t, f, base, "GET", cookie, nil)
				if code != 200 || body != id || sc != "" {
					t.Fatalf("request %d with the cookie: %d from %q, Set-Cookie %q; want %q without a new cookie", i, code, body, sc, id)
				}
			}
			// A cookie that names a replica of a revision without weight.
			old := eps[len(eps)-1].ID
			if code, body, sc := send(t, f, base, "GET", route.StickyCookie+"="+old, nil); code != 200 || body != old || sc != "" {
				t.Fatalf("cookie for %q: %d from %q, Set-Cookie %q", old, code, body, sc)
			}
			// The replica leaves: a fresh pick and a new cookie.
			eps = without(id)
			set()
			code, body, sc = send(t, f, base, "GET", cookie, nil)
			if code != 200 {
				t.Fatalf("status %d after the replica left", code)
			}
			next := stuckTo(t, sc)
			if next == id || body != next {
				t.Fatalf("after %q left: answered by %q, new cookie names %q", id, body, next)
			}
			if code, body, sc := send(t, f, base, "GET", route.StickyCookie+"="+next, nil); code != 200 || body != next || sc != "" {
				t.Fatalf("with the new cookie: %d from %q, Set-Cookie %q", code, body, sc)
			}
		})
	}
}

func TestStickyCookieParsing(t *testing.T) {
	for h, want := range map[string]string{
		"shoal-replica=web-1":                    "web-1",
		"a=1; shoal-replica=web-2; b=3":          "web-2",
		"a=1;shoal-replica=web-3":                "web-3",
		`shoal-replica="web-4"`:                  "web-4",
		"xshoal-replica=web-5":                   "",
		"shoal-replicas=web-6":                   "",
		"a=shoal-replica=web-7":                  "",
		"":                                       "",
		"shoal-replica=":                         "",
		"a=1;  shoal-replica=web-8 ; b=2":        "web-8",
		"shoal-replica=web-9; shoal-replica=w10": "web-9",
	} {
		if got := stickyID(h); got != want {
			t.Errorf("stickyID(%q) = %q, want %q", h, got, want)
		}
		if got := string(stickyID([]byte(h))); got != want {
			t.Errorf("stickyID([]byte(%q)) = %q, want %q", h, got, want)
		}
	}
	if v := setCookieValue("web-1f"); v != "shoal-replica=web-1f; Path=/; HttpOnly" {
		t.Errorf("setCookieValue = %q", v)
	}
	if v := setCookieValue("a b"); v != "" {
		t.Errorf("an ID with a space makes the cookie %q", v)
	}
}
