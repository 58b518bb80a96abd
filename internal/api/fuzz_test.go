package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/manifest"
)

// The services behind the fuzzed API validate with the parsers the daemon
// uses (job plans, shoal.toml, image references) and do nothing else.

type parsingJobs struct{ api.Jobs }

func (parsingJobs) Submit(_ context.Context, reqs []types.JobRequest) ([]types.Job, error) {
	if len(reqs) == 0 {
		return nil, errdefs.Invalid("jobs", "no job given")
	}
	out := make([]types.Job, len(reqs))
	for i, r := range reqs {
		prefix := ""
		if len(reqs) > 1 {
			prefix = fmt.Sprintf("jobs[%d].", i)
		}
		if _, err := jobs.NewPlan(r, prefix); err != nil {
			return nil, err
		}
		out[i] = types.Job{ID: fmt.Sprint(i), State: types.JobQueued}
	}
	return out, nil
}

type parsingApps struct{ api.Apps }

func (parsingApps) Deploy(_ context.Context, req types.DeployRequest) (types.App, error) {
	c, err := manifest.Parse([]byte(req.Manifest), req.File)
	if err != nil {
		return types.App{}, err
	}
	return types.App{Name: c.Name}, nil
}

func (parsingApps) Scale(_ context.Context, name string, _ types.ScaleRequest) (types.App, error) {
	return types.App{}, fmt.Errorf("app %q: %w", name, errdefs.ErrNotFound)
}

func (parsingApps) Rollback(_ context.Context, name string, _ types.RollbackRequest) (types.App, error) {
	return types.App{}, fmt.Errorf("app %q: %w", name, errdefs.ErrNotFound)
}

func (parsingApps) SetTraffic(_ context.Context, name string, _ types.TrafficRequest) (types.App, error) {
	return types.App{}, fmt.Errorf("app %q: %w", name, errdefs.ErrNotFound)
}

type parsingImages struct{ api.Images }

func ref(field, s string) error {
	if _, _, err := image.ParseReference(s); err != nil {
		return errdefs.Invalid(field, "%v", err)
	}
	return nil
}

func (parsingImages) Build(_ context.Context, req types.BuildRequest) (types.Image, error) {
	return types.Image{}, ref("tag", req.Tag)
}

func (parsingImages) Import(_ context.Context, req types.ImportRequest) ([]types.Image, error) {
	return nil, errdefs.Invalid("path", "%q: no such file", req.Path)
}

func (parsingImages) Pull(_ context.Context, req types.PullRequest) (types.Image, error) {
	return types.Image{}, ref("ref", req.Ref)
}

type parsingContainers struct{ api.Containers }

func (parsingContainers) Run(_ context.Context, req types.RunRequest, attach func() (io.Writer, io.Writer)) (types.Exit, error) {
	if err := ref("image", req.Image); err != nil {
		return types.Exit{}, err
	}
	attach()
	return types.Exit{}, nil
}

// fuzzRoutes are the calls with a request body.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/v1/jobs"}, {"POST", "/v1/apps"}, {"POST", "/v1/apps/web/scale"},
	{"POST", "/v1/apps/web/rollback"}, {"PUT", "/v1/apps/web/traffic"},
	{"POST", "/v1/images/build"}, {"POST", "/v1/images/import"}, {"POST", "/v1/images/pull"},
	{"POST", "/v1/containers/run"},
}

// FuzzRequestBodies posts arbitrary bodies to every call that takes one:
// the answer is never a server error, every refusal is a 4xx whose JSON
// body says what is wrong and names the field, and the server keeps
// answering.
func FuzzRequestBodies(f *testing.F) {
	seeds := map[int][]string{
		0: {`{"image":"busybox:1","steps":[{"args":["true"]}]}`, `[{"image":"a","steps":[{"args":["x"]}]},{"image":"b","steps":[]}]`,
			`{"image":"a","files":{"../x":"eA=="},"steps":[{"args":["x"]}]}`, `{"image":"a","steps":[{"args":["x"],"limits":{"memory":"1Ti"}}]}`,
			`{"image":"a","steps":[{"args":["x"]}]} trailing`, `[]`, `"x"`, `{"image":5}`},
		1: {`{"manifest":"name = \"web\"\nimage = \"web:1\"\n"}`, `{"manifest":"[scale\n"}`, `{"manifest":5}`},
		2: {`{"min":1,"max":2}`, `{"min":"1"}`},
		3: {`{"to":2}`, `{"to":-1}`},
		4: {`{"traffic":[{"revision":1,"percent":100}]}`, `{"traffic":{}}`},
		5: {`{"dir":"/x","tag":"a:1"}`, `{"dir":"/x","tag":"A"}`, `{"ports":[1,"x"]}`},
		6: {`{"path":"/x.tar"}`},
		7: {`{"ref":"busybox:1"}`, `{"ref":"a@b"}`},
		8: {`{"image":"busybox:1","args":["true"],"memory":"x"}`, `{"image":null}`},
	}
	for i, ss := range seeds {
		for _, s := range ss {
			f.Add(uint8(i), []byte(s))
		}
	}
	s := &api.Server{Jobs: parsingJobs{}, Apps: parsingApps{}, Images: parsingImages{}, Containers: parsingContainers{},
		Health: func(context.Context) types.Health { return types.Health{Status: "ok"} }}
	h := s.Handler("")
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(rt.method, rt.path, bytes.NewReader(body)))
		checkAnswer(t, rt.method+" "+rt.path, body, w)
		w = httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/health", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("health after %s %q: %d", rt.path, body, w.Code)
		}
	})
}

// checkAnswer fails unless w is a success or a 4xx naming the field.
func checkAnswer(t *testing.T, call string, body []byte, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code < 400 {
		return
	}
	var e types.Error
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Code >= 500 || e.Error == "" {
		t.Fatalf("%s %q: %d %s", call, body, w.Code, w.Body.Bytes())
	}
	if (w.Code == http.StatusBadRequest || w.Code == http.StatusRequestEntityTooLarge) && e.Field == "" {
		t.Fatalf("%s %q: %d %s names no field", call, body, w.Code, w.Body.Bytes())
	}
}

// TestOversizedBodies: a body over its call's limit is refused with 413
// naming the body, before it is read to the end, and the server keeps
// answering.
func TestOversizedBodies(t *testing.T) {
	s := &api.Server{Jobs: parsingJobs{}, Apps: parsingApps{}, Images: parsingImages{}, Containers: parsingContainers{},
		Health: func(context.Context) types.Health { return types.Health{Status: "ok"} }}
	ts := httptest.NewServer(s.Handler(""))
	defer ts.Close()
	for _, rt := range fuzzRoutes {
		limit := int64(api.MaxBody)
		if rt.path == "/v1/jobs" {
			limit = types.MaxJobBody
		}
		// A JSON string longer than the limit: valid up to where it is cut.
		body := io.MultiReader(bytes.NewReader([]byte(`{"x":"`)), io.LimitReader(zeros{}, limit))
		req, _ := http.NewRequest(rt.method, ts.URL+rt.path, body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", rt.method, rt.path, err)
		}
		var e types.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Field != "body" {
			t.Errorf("%s %s with %d bytes: %d %+v, want 413 naming the body", rt.method, rt.path, limit+6, resp.StatusCode, e)
		}
	}
	resp, err := http.Get(ts.URL + "/v1/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health after the oversized bodies: %v %v", resp, err)
	}
	resp.Body.Close()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}
