package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// fakeSecrets keeps values in memory, to test the HTTP mapping only.
type fakeSecrets struct{ values map[string]string }

func (f *fakeSecrets) List(_ context.Context, app string) ([]types.Secret, error) {
	var out []types.Secret
	for k, v := range f.values {
		if a, n, _ := strings.Cut(k, "/"); a == app {
			out = append(out, types.Secret{Name: n, Size: len(v), Updated: time.Unix(1, 0).UTC()})
		}
	}
	return out, nil
}

func (f *fakeSecrets) Set(_ context.Context, app, name string, v []byte) (types.Secret, error) {
	f.values[app+"/"+name] = string(v)
	return types.Secret{Name: name, Size: len(v)}, nil
}

func (f *fakeSecrets) Delete(_ context.Context, app, name string) error {
	if _, ok := f.values[app+"/"+name]; !ok {
		return fmt.Errorf("secret %q: %w", name, errdefs.ErrNotFound)
	}
	delete(f.values, app+"/"+name)
	return nil
}

func TestSecretsRoutes(t *testing.T) {
	f := &fakeSecrets{values: map[string]string{}}
	srv := httptest.NewServer((&Server{Secrets: f}).Handler(""))
	defer srv.Close()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// "aHVudGVyMg==" is base64 for hunter2.
	if code, body := do("PUT", "/v1/apps/web/secrets/db", `{"value":"aHVudGVyMg=="}`); code != 200 || strings.Contains(body, "aHVudGVyMg") {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if f.values["web/db"] != "hunter2" {
		t.Fatalf("stored %q", f.values["web/db"])
	}
	if code, body := do("PUT", "/v1/apps/web/secrets/db", `{"value":"aHVudGVyMg==","env":true}`); code != 400 || !strings.Contains(body, "env") {
		t.Fatalf("PUT with an unknown field: %d %s", code, body)
	}
	code, body := do("GET", "/v1/apps/web/secrets", "")
	if code != 200 || !strings.Contains(body, `"name": "db"`) || strings.Contains(body, "hunter2") || strings.Contains(body, "aHVudGVyMg") {
		t.Fatalf("GET: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/apps/api/secrets", ""); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("GET none: %d %s", code, body)
	}
	if code, _ := do("DELETE", "/v1/apps/web/secrets/db", ""); code != 204 {
		t.Fatalf("DELETE: %d", code)
	}
	if code, _ := do("DELETE", "/v1/apps/web/secrets/db", ""); code != 404 {
		t.Fatalf("DELETE again: %d", code)
	}

	off := httptest.NewServer((&Server{}).Handler(""))
	defer off.Close()
	resp, err := http.Get(off.URL + "/v1/apps/web/secrets")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("without a Secrets service: %d, want 503", resp.StatusCode)
	}
}
