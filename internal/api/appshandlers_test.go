package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// fakeApps is an in-process Apps for testing the HTTP mapping only.
type fakeApps struct {
	mu   sync.Mutex
	apps map[string]types.App
	last types.ScaleRequest
}

func (f *fakeApps) Deploy(_ context.Context, req types.DeployRequest) (types.App, error) {
	if strings.Contains(req.Manifest, "mxa") {
		return types.App{}, fmt.Errorf("%s: %w", req.File, errdefs.Invalid("scale.mxa", "unknown field"))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a := types.App{Name: "web", Image: "web:1", Revision: len(f.apps) + 1, Max: 10, State: "idle"}
	f.apps[a.Name] = a
	return a, nil
}

func (f *fakeApps) List(context.Context) ([]types.App, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []types.App
	for _, a := range f.apps {
		out = append(out, a)
	}
	return out, nil
}

func (f *fakeApps) Get(_ context.Context, name string) (types.App, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.apps[name]
	if !ok {
		return types.App{}, fmt.Errorf("app %q: %w", name, errdefs.ErrNotFound)
	}
	return a, nil
}

func (f *fakeApps) Scale(ctx context.Context, name string, req types.ScaleRequest) (types.App, error) {
	a, err := f.Get(ctx, name)
	if err != nil {
		return types.App{}, err
	}
	if req.Max != nil && *req.Max < 1 {
		return types.App{}, errdefs.Invalid("max", "must be at least 1")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = req
	if req.Min != nil {
		a.Min = *req.Min
	}
	if req.Max != nil {
		a.Max = *req.Max
	}
	f.apps[name] = a
	return a, nil
}

func (f *fakeApps) Logs(ctx context.Context, name string, req types.LogsRequest, w io.Writer) error {
	if _, err := f.Get(ctx, name); err != nil {
		return err
	}
	fmt.Fprintf(w, "tail=%d\nhello from %s\n", req.Tail, name)
	fmt.Fprintf(w, "since=%s replica=%q follow=%v timestamps=%v\n", req.Since.Format(time.RFC3339), req.Replica, req.Follow, req.Timestamps)
	return nil
}

func (f *fakeApps) Remove(ctx context.Context, name string) error {
	if _, err := f.Get(ctx, name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.apps, name)
	return nil
}

func (f *fakeApps) Rollback(ctx context.Context, name string, req types.RollbackRequest) (types.App, error) {
	a, err := f.Get(ctx, name)
	if err != nil {
		return types.App{}, err
	}
	to := req.To
	if to == 0 {
		to = a.Revision - 1
	}
	if to < 1 || to > a.Revision {
		return types.App{}, errdefs.Invalid("to", "app %q has no revision %d", name, to)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a.Revision, a.Traffic = to, []types.TrafficTarget{{Revision: to, Percent: 100}}
	f.apps[name] = a
	return a, nil
}

func (f *fakeApps) SetTraffic(ctx context.Context, name string, req types.TrafficRequest) (types.App, error) {
	a, err := f.Get(ctx, name)
	if err != nil {
		return types.App{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a.Traffic, a.Sticky = req.Traffic, req.Sticky
	f.apps[name] = a
	return a, nil
}

// fakeEvents holds events in memory; Watch sends the kept ones and then
// whatever is added until ctx ends.
type fakeEvents struct {
	mu       sync.Mutex
	evs      []types.Event
	watchers []chan types.Event
}

func (f *fakeEvents) add(e types.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.Seq = int64(len(f.evs) + 1)
	f.evs = append(f.evs, e)
	for _, w := range f.watchers {
		w <- e
	}
}

func (f *fakeEvents) List(_ context.Context, after int64, app string) ([]types.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []types.Event
	for _, e := range f.evs {
		if e.Seq > after && (app == "" || e.App == app) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (f *fakeEvents) Watch(ctx context.Context, after int64, app string) (<-chan types.Event, error) {
	in := make(chan types.Event, 100)
	out := make(chan types.Event)
	f.mu.Lock()
	for _, e := range f.evs {
		in <- e
	}
	f.watchers = append(f.watchers, in)
	f.mu.Unlock()
	go func() {
		defer close(out)
		for {
			select {
			case e := <-in:
				if e.Seq > after && (app == "" || e.App == app) {
					select {
					case out <- e:
					case <-ctx.Done():
						return
					}
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func appServer(t *testing.T) (*httptest.Server, *fakeApps, *fakeEvents) {
	fa := &fakeApps{apps: map[string]types.App{}}
	fe := &fakeEvents{}
	ts := httptest.NewServer((&Server{Apps: fa, Events: fe}).Handler(""))
	t.Cleanup(ts.Close)
	return ts, fa, fe
}

func do(t *testing.T, method, url, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestAppRoutes(t *testing.T) {
	ts, fa, _ := appServer(t)
	cases := []struct {
		name, method, path, body string
		code                     int
		field, contains          string
	}{
		{"list empty", "GET", "/v1/apps", "", 200, "", "[]"},
		{"deploy", "POST", "/v1/apps", `{"manifest":"name = \"web\"","file":"shoal.toml"}`, 201, "", `"revision": 1`},
		{"deploy bad key", "POST", "/v1/apps", `{"manifest":"[scale]\nmxa = 1","file":"my.toml"}`, 400, "scale.mxa", "my.toml: scale.mxa: unknown field"},
		{"deploy empty", "POST", "/v1/apps", `{"manifest":" "}`, 400, "manifest", "empty"},
		{"deploy unknown json", "POST", "/v1/apps", `{"manifets":"x"}`, 400, "manifets", ""},
		{"list", "GET", "/v1/apps", "", 200, "", `"name": "web"`},
		{"get", "GET", "/v1/apps/web", "", 200, "", `"image": "web:1"`},
		{"get missing", "GET", "/v1/apps/nope", "", 404, "", `app \"nope\": not found`},
		{"scale", "POST", "/v1/apps/web/scale", `{"min":2}`, 200, "", `"min": 2`},
		{"scale nothing", "POST", "/v1/apps/web/scale", `{}`, 400, "min", "give min, max or both"},
		{"scale invalid", "POST", "/v1/apps/web/scale", `{"max":0}`, 400, "max", "at least 1"},
		{"scale type", "POST", "/v1/apps/web/scale", `{"max":"3"}`, 400, "max", ""},
		{"scale missing", "POST", "/v1/apps/nope/scale", `{"max":3}`, 404, "", "not found"},
		{"logs", "GET", "/v1/apps/web/logs?tail=5", "", 200, "", "tail=5\nhello from web"},
		{"logs all", "GET", "/v1/apps/web/logs", "", 200, "", "tail=0"},
		{"logs bad tail", "GET", "/v1/apps/web/logs?tail=-1", "", 400, "tail", "whole number"},
		{"logs since replica follow", "GET", "/v1/apps/web/logs?since=2026-01-02T15:04:05Z&replica=web-1&follow=true&timestamps=1", "", 200, "",
			`since=2026-01-02T15:04:05Z replica="web-1" follow=true timestamps=true`},
		{"logs bad since", "GET", "/v1/apps/web/logs?since=yesterday", "", 400, "since", "RFC 3339"},
		{"logs bad follow", "GET", "/v1/apps/web/logs?follow=maybe", "", 400, "follow", "true or false"},
		{"logs missing", "GET", "/v1/apps/nope/logs", "", 404, "", "not found"},
		{"rollback", "POST", "/v1/apps/web/rollback", `{"to":1}`, 200, "", `"percent": 100`},
		{"rollback no body", "POST", "/v1/apps/web/rollback", "", 400, "to", "no revision 0"},
		{"rollback negative", "POST", "/v1/apps/web/rollback", `{"to":-1}`, 400, "to", "revision number"},
		{"rollback type", "POST", "/v1/apps/web/rollback", `{"to":"x"}`, 400, "to", ""},
		{"rollback missing", "POST", "/v1/apps/nope/rollback", `{"to":1}`, 404, "", "not found"},
		{"traffic", "PUT", "/v1/apps/web/traffic", `{"traffic":[{"revision":1,"percent":100}],"sticky":true}`, 200, "", `"sticky": true`},
		{"traffic empty", "PUT", "/v1/apps/web/traffic", `{}`, 400, "traffic", "percent"},
		{"traffic unknown json", "PUT", "/v1/apps/web/traffic", `{"trafic":[]}`, 400, "trafic", ""},
		{"traffic missing", "PUT", "/v1/apps/nope/traffic", `{"traffic":[{"revision":1,"percent":100}]}`, 404, "", "not found"},
		{"wrong method", "PUT", "/v1/apps/web", "", 405, "", "not allowed"},
		{"remove", "DELETE", "/v1/apps/web", "", 204, "", ""},
		{"remove again", "DELETE", "/v1/apps/web", "", 404, "", "not found"},
	}
	for _, c := range cases {
		resp, body := do(t, c.method, ts.URL+c.path, c.body)
		if resp.StatusCode != c.code || !strings.Contains(string(body), c.contains) {
			t.Errorf("%s: %s %s: %d %s; want %d with %q", c.name, c.method, c.path, resp.StatusCode, body, c.code, c.contains)
			continue
		}
		if c.code >= 400 {
			var e types.Error
			if err := json.Unmarshal(body, &e); err != nil || e.Field != c.field || e.Error == "" {
				t.Errorf("%s: error body %s; want field %q", c.name, body, c.field)
			}
		}
		if c.name == "logs" && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Errorf("logs: content type %q", resp.Header.Get("Content-Type"))
		}
	}
	if fa.last.Min == nil || *fa.last.Min != 2 || fa.last.Max != nil {
		t.Errorf("scale request reached the service as %+v", fa.last)
	}
}

func TestAppsNotEnabled(t *testing.T) {
	ts := httptest.NewServer((&Server{}).Handler(""))
	defer ts.Close()
	for _, p := range []string{"/v1/apps", "/v1/apps/web", "/v1/events"} {
		resp, body := do(t, "GET", ts.URL+p, "")
		var e types.Error
		if resp.StatusCode != 503 || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "serving is not enabled") {
			t.Errorf("GET %s without serving: %d %s", p, resp.StatusCode, body)
		}
	}
}

func TestEventsList(t *testing.T) {
	ts, _, fe := appServer(t)
	fe.add(types.Event{Kind: "scale", App: "a", Reason: "up", Inputs: map[string]float64{"rps": 4}})
	fe.add(types.Event{Kind: "state", App: "b", Reason: "ready"})
	fe.add(types.Event{Kind: "state", App: "a", Reason: "frozen"})
	for _, c := range []struct {
		q    string
		want string
	}{
		{"", "[1 2 3]"}, {"?after=1", "[2 3]"}, {"?app=a", "[1 3]"}, {"?app=a&after=1", "[3]"}, {"?app=c", "[]"},
		{"?follow=false", "[1 2 3]"},
	} {
		resp, body := do(t, "GET", ts.URL+"/v1/events"+c.q, "")
		var evs []types.Event
		if err := json.Unmarshal(body, &evs); err != nil || resp.StatusCode != 200 {
			t.Fatalf("events%s: %d %s", c.q, resp.StatusCode, body)
		}
		var got []int64
		for _, e := range evs {
			got = append(got, e.Seq)
		}
		if fmt.Sprint(got) != c.want || evs == nil {
			t.Errorf("events%s: %v, want %s", c.q, got, c.want)
		}
	}
	for _, q := range []string{"?after=x", "?after=-2", "?follow=maybe"} {
		resp, body := do(t, "GET", ts.URL+"/v1/events"+q, "")
		if resp.StatusCode != 400 || !strings.Contains(string(body), `"field"`) {
			t.Errorf("events%s: %d %s; want 400 naming the field", q, resp.StatusCode, body)
		}
	}
}

// readSSE reads n events from a server-sent event stream.
func readSSE(t *testing.T, r *bufio.Reader, n int) []types.Event {
	t.Helper()
	var out []types.Event
	for len(out) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended after %d events: %v", len(out), err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var e types.Event
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				t.Fatalf("data line %q: %v", line, err)
			}
			out = append(out, e)
		}
	}
	return out
}

func TestEventsStream(t *testing.T) {
	ts, _, fe := appServer(t)
	fe.add(types.Event{Kind: "scale", App: "a", Reason: "up"})
	fe.add(types.Event{Kind: "scale", App: "b", Reason: "up"})
	for _, c := range []struct {
		name   string
		query  string
		accept string
	}{
		{"accept", "?app=a", "text/event-stream"},
		{"follow", "?app=a&follow=true", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/events"+c.query, nil)
			if c.accept != "" {
				req.Header.Set("Accept", c.accept)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			r := bufio.NewReader(resp.Body)
			if got := readSSE(t, r, 1); got[0].Seq != 1 || got[0].App != "a" {
				t.Fatalf("first event %+v", got[0])
			}
			// A later event arrives while the request is open (it is flushed).
			fe.add(types.Event{Kind: "state", App: "b", Reason: "ready"})
			fe.add(types.Event{Kind: "state", App: "a", Reason: "frozen"})
			if got := readSSE(t, r, 1); got[0].Reason != "frozen" || got[0].App != "a" {
				t.Fatalf("followed event %+v", got[0])
			}
		})
	}
}

func TestEventsStreamResumes(t *testing.T) {
	ts, _, fe := appServer(t)
	for i := 0; i < 3; i++ {
		fe.add(types.Event{Kind: "k", Reason: fmt.Sprint(i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := readSSE(t, bufio.NewReader(resp.Body), 1); got[0].Seq != 3 {
		t.Fatalf("resumed at %d, want 3", got[0].Seq)
	}
}
