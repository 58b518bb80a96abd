package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// A request waiting on an endpoint whose connections are cut (its node
// left the cluster's live set: the route drops it, then Cut) does not
// hang: a GET without a body is sent again to another endpoint of the
// app, and a POST with a body (of known length or chunked), which may not
// be sent twice, is answered 502 at once. So on the fast path and on the
// net/http path.
func TestCutRequestWaitingOnDeadEndpoint(t *testing.T) {
	for _, path := range []string{"fast", "net/http"} {
		for _, method := range []string{"GET", "POST", "POST-chunked"} {
			t.Run(path+"/"+method, func(t *testing.T) {
				arrived := make(chan struct{}, 1)
				release := make(chan struct{})
				dead := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
					arrived <- struct{}{}
					select {
					case <-r.Context().Done():
					case <-release:
					}
				})
				t.Cleanup(func() { close(release) })
				ok := namedBackend(t, "ok")
				f := newFront(t, Options{})
				url := f.url
				if path == "net/http" {
					srv := httptest.NewServer(f.p)
					t.Cleanup(srv.Close)
					url = srv.URL
				}
				deadEp := route.Endpoint{ID: "x-dead", Addr: dead.addr}
				okEp := route.Endpoint{ID: "x-ok", Addr: ok.addr}
				f.p.SetRoute(route.Route{App: "x", Endpoints: []route.Endpoint{deadEp}})
				var body *strings.Reader
				if method == "GET" {
					body = strings.NewReader("")
				} else {
					body = strings.NewReader("payload")
				}
				req, _ := http.NewRequest(strings.TrimSuffix(method, "-chunked"), url+"/", body)
				req.Host = "x.localhost"
				switch method {
				case "GET":
					req.Body, req.ContentLength = nil, 0
				case "POST-chunked":
					req.ContentLength = -1
				}
				res := f.goDo(req)
				recv(t, arrived, "the request at the dead endpoint")
				f.p.SetRoute(route.Route{App: "x", Endpoints: []route.Endpoint{okEp}})
				f.p.Cut("x-dead")
				r := recv(t, res, "the answer")
				if r.err != nil {
					t.Fatal(r.err)
				}
				if method == "GET" {
					if r.code != http.StatusOK || r.body != "ok" {
						t.Fatalf("GET: got %d %q, want 200 from the other endpoint", r.code, r.body)
					}
					return
				}
				if r.code != http.StatusBadGateway {
					t.Fatalf("POST: got %d %q, want 502", r.code, r.body)
				}
				if n := ok.hits.Load(); n != 0 {
					t.Fatalf("POST with a body was sent again to the other endpoint (%d hits)", n)
				}
			})
		}
	}
}
