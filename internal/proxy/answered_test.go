package proxy

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// An endpoint's load counts the requests its replica answered below 500:
// what proves it alive between health checks. A 5xx answer, or no answer
// (nothing listens), is no proof.
func TestEndpointLoadCountsAnswers(t *testing.T) {
	f := newFront(t, Options{})
	status := func(code int) *backend {
		return newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) })
	}
	cases := []struct {
		name     string
		addr     string
		code     int
		answered uint64
	}{
		{"ok", status(200).addr, 200, 3},
		{"not found", status(404).addr, 404, 3},
		{"server error", status(500).addr, 500, 0},
		{"nothing listens", deadAddr(t), http.StatusBadGateway, 0},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			app := "answers-" + strconv.Itoa(i)
			f.p.SetRoute(route.Route{App: app, Endpoints: []route.Endpoint{{ID: app + "-a", Addr: c.addr}}})
			for range 3 {
				if code, _, _ := f.get(t, app+".localhost", "/"); code != c.code {
					t.Fatalf("status %d, want %d", code, c.code)
				}
			}
			el := f.p.Load(app).Endpoints[app+"-a"]
			if el.Requests != 3 || el.Answered != c.answered {
				t.Fatalf("endpoint load %+v, want 3 requests and %d answered", el, c.answered)
			}
		})
	}
}
