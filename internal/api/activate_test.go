package api

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// wakingApps is fakeApps that records wake-ups.
type wakingApps struct {
	*fakeApps
	woken []string
}

func (w *wakingApps) Activate(app string) { w.woken = append(w.woken, app) }

// POST /v1/apps/{name}/activate wakes the app and answers 202; without
// serving it answers 503.
func TestActivateRoute(t *testing.T) {
	wa := &wakingApps{fakeApps: &fakeApps{apps: map[string]types.App{}}}
	ts := httptest.NewServer((&Server{Apps: wa}).Handler(""))
	defer ts.Close()
	resp, err := http.Post(ts.URL+"/v1/apps/web/activate", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || len(wa.woken) != 1 || wa.woken[0] != "web" {
		t.Fatalf("activate: %d, woken %v", resp.StatusCode, wa.woken)
	}
	off := httptest.NewServer((&Server{}).Handler(""))
	defer off.Close()
	resp, err = http.Post(off.URL+"/v1/apps/web/activate", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("activate without serving: %d", resp.StatusCode)
	}
}
