package localnode

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
)

// Stand-ins for the parts a check does not use.
type (
	noRuntime struct{ Runtime }
	noImages  struct{ Images }
	noNetwork struct{ Network }
	noRouter  struct{ Router }
)

// An HTTP health check says what it is in its User-Agent, with the
// daemon's version: an operator can leave the checks out of access logs.
func TestHTTPCheckUserAgent(t *testing.T) {
	agents := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			select {
			case agents <- r.UserAgent():
			default:
			}
		}
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct{ version, want string }{{"1.2.3", "shoal-health/1.2.3"}, {"", "shoal-health/dev"}} {
		n, err := New(Options{Runtime: noRuntime{}, Images: noImages{}, Network: noNetwork{}, Router: noRouter{}, Version: c.version})
		if err != nil {
			t.Fatal(err)
		}
		addr := strings.TrimPrefix(srv.URL, "http://")
		h := manifest.Health{HTTP: "/healthz", Timeout: manifest.Duration{Duration: 30 * time.Second}}
		if err := n.Check(context.Background(), "r1", addr, h); err != nil {
			t.Fatalf("check: %v", err)
		}
		if got := <-agents; got != c.want {
			t.Errorf("version %q: User-Agent %q, want %q", c.version, got, c.want)
		}
	}
}
