package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shoal-run/shoal/internal/api"
)

// wakeApps is an api.Apps that records its wake-ups.
type wakeApps struct {
	api.Apps
	woke chan string
}

func (w wakeApps) Activate(app string) { w.woke <- app }

// TestAppsWithSecretsWakes: the apps wrapped with their secrets are still
// woken by the proxy's activate call (a cold app's first request).
func TestAppsWithSecretsWakes(t *testing.T) {
	woke := make(chan string, 1)
	srv := &api.Server{Apps: appsWithSecrets{Apps: wakeApps{woke: woke}}}
	rec := httptest.NewRecorder()
	srv.Handler("").ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/apps/cold/activate", nil))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("activate: %d %s; want 202", rec.Code, rec.Body)
	}
	select {
	case app := <-woke:
		if app != "cold" {
			t.Fatalf("woke %q; want cold", app)
		}
	default:
		t.Fatal("the apps were not woken")
	}
}
