package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// fakeImages is an in-process Images for testing the HTTP mapping only.
type fakeImages struct{ Images }

func (fakeImages) Get(_ context.Context, ref string) (types.Image, error) {
	if ref == "a/b:1" {
		return types.Image{Ref: ref}, nil
	}
	return types.Image{}, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
}

func (fakeImages) Build(_ context.Context, req types.BuildRequest) (types.Image, error) {
	return types.Image{}, errdefs.Invalid("tag", "%q is not NAME:TAG", req.Tag)
}

func TestLocalErrorMapping(t *testing.T) {
	s := &Server{Images: fakeImages{}}
	ts := httptest.NewServer(s.Handler(""))
	defer ts.Close()
	for _, c := range []struct {
		body  string
		code  int
		field string
	}{
		{`{"dir":"/x","tag":"BAD"}`, 400, "tag"},
		{`{"dri":"/x"}`, 400, "dri"},
		{`{"dir":5}`, 400, "dir"},
		{`{`, 400, "body"},
	} {
		resp, err := http.Post(ts.URL+"/v1/images/build", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var e types.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.code || e.Field != c.field || e.Error == "" {
			t.Errorf("build %s: status %d field %q (%s); want %d field %q", c.body, resp.StatusCode, e.Field, e.Error, c.code, c.field)
		}
	}
}

func TestServerErrorMapping(t *testing.T) {
	s := &Server{Images: fakeImages{}, Health: func(context.Context) types.Health { return types.Health{Status: "ok"} }}
	ts := httptest.NewServer(s.Handler("sekret"))
	defer ts.Close()
	do := func(method, path, body string, auth bool) (int, types.Error) {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if auth {
			req.Header.Set("Authorization", "Bearer sekret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e types.Error
		b, _ := io.ReadAll(resp.Body)
		json.Unmarshal(b, &e)
		return resp.StatusCode, e
	}
	cases := []struct {
		name, method, path, body string
		auth                     bool
		code                     int
		field                    string
	}{
		{"health needs no token", "GET", "/v1/health", "", false, 200, ""},
		{"others need the token", "GET", "/v1/images/a/b:1", "", false, 401, ""},
		{"ref with a slash", "GET", "/v1/images/a/b:1", "", true, 200, ""},
		{"not found", "GET", "/v1/images/nosuch:1", "", true, 404, ""},
		{"build is local only", "POST", "/v1/images/build", `{"dir":"/etc","tag":"x:1"}`, true, 403, ""},
		{"import is local only", "POST", "/v1/images/import", `{"path":"/etc/shadow"}`, true, 403, ""},
		{"wrong method", "POST", "/v1/images", "", true, 405, ""},
		{"unknown endpoint", "GET", "/v1/nothing", "", true, 404, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, e := do(c.method, c.path, c.body, c.auth)
			if code != c.code || e.Field != c.field {
				t.Fatalf("%s %s: status %d field %q (%s); want %d field %q", c.method, c.path, code, e.Field, e.Error, c.code, c.field)
			}
			if code >= 400 && e.Error == "" {
				t.Fatalf("%s %s: error body has no message", c.method, c.path)
			}
		})
	}
}
