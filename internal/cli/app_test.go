package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// fakeApps and fakeEvents stand in for the serving service behind the real
// API handler: these tests cover the commands' flags, requests and output.
type fakeApps struct {
	app      types.App
	manifest string
	scale    types.ScaleRequest
	rollback types.RollbackRequest
	traffic  types.TrafficRequest
	// rollouts are what Get reports, one per call (the last one sticks).
	rollouts []types.Rollout
}

func (f *fakeApps) Deploy(_ context.Context, req types.DeployRequest) (types.App, error) {
	if strings.Contains(req.Manifest, "mxa") {
		return types.App{}, fmt.Errorf("%s: %w", req.File, errdefs.Invalid("scale.mxa", "unknown field"))
	}
	f.manifest = req.Manifest
	a := f.app
	if strings.Contains(req.Manifest, "/bin/sh") {
		a.Warnings = []string{req.File + ": command starts with /bin/sh"}
	}
	return a, nil
}
func (f *fakeApps) List(context.Context) ([]types.App, error) { return []types.App{f.app}, nil }
func (f *fakeApps) Get(_ context.Context, name string) (types.App, error) {
	if name != f.app.Name {
		return types.App{}, fmt.Errorf("app %q: %w", name, errdefs.ErrNotFound)
	}
	if len(f.rollouts) > 0 {
		ro := f.rollouts[0]
		f.app.Rollout = &ro
		if len(f.rollouts) > 1 {
			f.rollouts = f.rollouts[1:]
		}
	}
	return f.app, nil
}
func (f *fakeApps) Rollback(_ context.Context, name string, req types.RollbackRequest) (types.App, error) {
	f.rollback = req
	a := f.app
	a.Revision, a.Rollout = 1, &types.Rollout{Revision: 1, From: 2, State: types.RolloutDone}
	return a, nil
}
func (f *fakeApps) SetTraffic(_ context.Context, name string, req types.TrafficRequest) (types.App, error) {
	f.traffic = req
	a := f.app
	a.Traffic, a.Sticky = req.Traffic, req.Sticky
	return a, nil
}
func (f *fakeApps) Scale(_ context.Context, name string, req types.ScaleRequest) (types.App, error) {
	f.scale = req
	a := f.app
	if req.Min != nil {
		a.Min = *req.Min
	}
	if req.Max != nil {
		a.Max = *req.Max
	}
	return a, nil
}
func (f *fakeApps) Logs(_ context.Context, name string, req types.LogsRequest, w io.Writer) error {
	fmt.Fprintf(w, "line of %s, tail %d", name, req.Tail)
	if !req.Since.IsZero() {
		fmt.Fprintf(w, ", since %s ago", time.Since(req.Since).Round(time.Minute))
	}
	if req.Replica != "" || req.Follow || req.Timestamps {
		fmt.Fprintf(w, ", replica %q follow %v timestamps %v", req.Replica, req.Follow, req.Timestamps)
	}
	fmt.Fprintln(w)
	return nil
}
func (f *fakeApps) Remove(context.Context, string) error { return nil }

type fakeEvents struct{ evs []types.Event }

func (f *fakeEvents) List(_ context.Context, after int64, app string) ([]types.Event, error) {
	var out []types.Event
	for _, e := range f.evs {
		if e.Seq > after && (app == "" || e.App == app) {
			out = append(out, e)
		}
	}
	return out, nil
}

// Watch sends the kept events and ends, which ends the stream.
func (f *fakeEvents) Watch(ctx context.Context, after int64, app string) (<-chan types.Event, error) {
	evs, _ := f.List(ctx, after, app)
	ch := make(chan types.Event, len(evs))
	for _, e := range evs {
		ch <- e
	}
	close(ch)
	return ch, nil
}

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

func appDaemon(t *testing.T) (string, *fakeApps) {
	fa := &fakeApps{app: types.App{Name: "hello", Image: "hello:1", Revision: 2, Min: 0, Max: 10, State: "running", Ready: 1,
		CreatedAt: t0, UpdatedAt: t0,
		Replicas: []types.Replica{{ID: "hello-abc", Revision: 2, State: "ready", Pid: 4242, Addr: "10.77.0.5:8080", CPUSet: "1", StartedAt: t0, InFlight: 3}}}}
	fe := &fakeEvents{evs: []types.Event{
		{Seq: 1, Time: t0, Kind: "scale", App: "hello", Reason: "cold start", Inputs: map[string]float64{"queued": 1}},
		{Seq: 2, Time: t0, Kind: "state", App: "other", Replica: "other-x", Reason: "ready"},
	}}
	s := &api.Server{Apps: fa, Events: fe, Health: func(context.Context) types.Health { return types.Health{Status: "ok", Proxy: "127.0.0.1:18080"} }}
	ts := httptest.NewServer(s.Handler(""))
	t.Cleanup(ts.Close)
	return ts.URL, fa
}

func shoal(t *testing.T, host string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(append([]string{"--host", host}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestAppDeploy(t *testing.T) {
	host, fa := appDaemon(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "shoal.toml")
	os.WriteFile(good, []byte("name = \"hello\"\nimage = \"hello:1\"\n"), 0o644)
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("name = \"hello\"\n[scale]\nmxa = 3\n"), 0o644)

	code, out, errs := shoal(t, host, "app", "deploy", "-f", good)
	if code != 0 || !strings.Contains(out, "deployed hello revision 2") || !strings.Contains(out, "url: http://hello.localhost:18080") {
		t.Fatalf("deploy: %d %q %q", code, out, errs)
	}
	if !strings.Contains(fa.manifest, `image = "hello:1"`) {
		t.Fatalf("manifest sent: %q", fa.manifest)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-f", filepath.Join(dir, "missing.toml")}, "missing.toml: no such file"},
		{[]string{"-f", dir}, dir},
		{[]string{"-f", bad}, "bad.toml: scale.mxa: unknown field"},
	} {
		code, _, errs := shoal(t, host, append([]string{"app", "deploy"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("deploy %v: exit %d %q; want 2 naming %q", c.args, code, errs, c.want)
		}
	}
	// A deploy's warnings go to standard error, and stay in its JSON.
	warned := filepath.Join(dir, "warned.toml")
	os.WriteFile(warned, []byte("name = \"hello\"\nimage = \"hello:1\"\ncommand = [\"/bin/sh\", \"-c\", \"x\"]\n"), 0o644)
	code, out, errs = shoal(t, host, "app", "deploy", "-f", warned, "--detach")
	if code != 0 || !strings.Contains(errs, "warning: "+warned+": command starts with /bin/sh") || strings.Contains(out, "warning") {
		t.Errorf("deploy of a manifest with a warning: %d %q %q", code, out, errs)
	}
	if code, out, _ = shoal(t, host, "app", "deploy", "-f", warned, "--output", "json"); code != 0 || !strings.Contains(out, `"warnings"`) {
		t.Errorf("deploy --output json: %d %q has no warnings", code, out)
	}
	// The key is named once, not again in front of the file's name.
	if _, _, errs := shoal(t, host, "app", "deploy", "-f", bad); strings.Count(errs, "scale.mxa") != 1 {
		t.Errorf("deploy -f bad.toml: %q names the key more than once", errs)
	}
}

func TestAppStatusAndLs(t *testing.T) {
	host, _ := appDaemon(t)
	code, out, errs := shoal(t, host, "app", "status", "hello")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	for _, want := range []string{"ID", "REVISION", "STATE", "PID", "ADDR", "CPUS", "STARTED", "IN-FLIGHT", "REASON", "hello-abc", "ready", "4242", "10.77.0.5:8080"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NODE") {
		t.Errorf("a single host's status has a NODE column:\n%s", out)
	}
	code, out, _ = shoal(t, host, "app", "status", "hello", "--output", "json")
	var a types.App
	if code != 0 || json.Unmarshal([]byte(out), &a) != nil || a.Replicas[0].Pid != 4242 || !a.Replicas[0].StartedAt.Equal(t0) {
		t.Fatalf("status json: %d %s", code, out)
	}
	if code, _, errs := shoal(t, host, "app", "status", "nope"); code != 1 || !strings.Contains(errs, `app "nope": not found`) {
		t.Fatalf("status of a missing app: %d %q", code, errs)
	}
	code, out, _ = shoal(t, host, "app", "ls")
	if code != 0 || !strings.Contains(out, "hello:1") || !strings.Contains(out, "1/1") || !strings.Contains(out, "0-10") {
		t.Fatalf("ls: %d %s", code, out)
	}
}

func TestAppScaleLogsRm(t *testing.T) {
	host, fa := appDaemon(t)
	code, out, errs := shoal(t, host, "app", "scale", "hello", "--min", "0")
	if code != 0 || !strings.Contains(out, "hello: scale 0-10") || fa.scale.Min == nil || *fa.scale.Min != 0 || fa.scale.Max != nil {
		t.Fatalf("scale --min 0: %d %q %q, sent %+v", code, out, errs, fa.scale)
	}
	for _, args := range [][]string{{}, {"--min", "-1"}, {"--max", "0"}, {"--min", "5", "--max", "2"}} {
		if code, _, errs := shoal(t, host, append([]string{"app", "scale", "hello"}, args...)...); code != 2 {
			t.Errorf("scale %v: exit %d %q; want 2", args, code, errs)
		}
	}
	code, out, _ = shoal(t, host, "app", "logs", "hello", "--tail", "7")
	if code != 0 || out != "line of hello, tail 7\n" {
		t.Fatalf("logs: %d %q", code, out)
	}
	code, out, _ = shoal(t, host, "app", "logs", "hello", "--since", "10m", "--replica", "hello-1", "-f", "-t")
	if want := "line of hello, tail 0, since 10m0s ago, replica \"hello-1\" follow true timestamps true\n"; code != 0 || out != want {
		t.Fatalf("logs --since 10m --replica hello-1 -f -t: %d %q, want %q", code, out, want)
	}
	for _, bad := range [][]string{{"--since", "yesterday"}, {"--since", "-5m"}, {"--tail", "-1"}} {
		if code, _, errs := shoal(t, host, append([]string{"app", "logs", "hello"}, bad...)...); code != 2 || !strings.Contains(errs, bad[0]) {
			t.Errorf("logs %v: exit %d %q; want 2 naming %s", bad, code, errs, bad[0])
		}
	}
	code, out, _ = shoal(t, host, "app", "rm", "hello")
	if code != 0 || out != "removed hello\n" {
		t.Fatalf("rm: %d %q", code, out)
	}
}

func TestEventsCmd(t *testing.T) {
	host, _ := appDaemon(t)
	code, out, errs := shoal(t, host, "events")
	if code != 0 || !strings.Contains(out, "cold start") || !strings.Contains(out, "queued=1") || !strings.Contains(out, "other-x") {
		t.Fatalf("events: %d %q %q", code, out, errs)
	}
	// --output json prints one object a line, with --follow or without.
	code, out, _ = shoal(t, host, "events", "--app", "hello", "--output", "json")
	var ev types.Event
	if code != 0 || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &ev) != nil || ev.Seq != 1 {
		t.Fatalf("events --app json: %d %s", code, out)
	}
	code, out, _ = shoal(t, host, "events", "--output", "json")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) < 2 {
		t.Fatalf("events json: %d %q, want one line per event", code, out)
	}
	for _, l := range lines {
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("events json: line %q: %v", l, err)
		}
	}
	code, out, errs = shoal(t, host, "events", "--follow", "--output", "json", "--after", "1")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	var e types.Event
	if code != 0 || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &e) != nil || e.Seq != 2 {
		t.Fatalf("events --follow: %d %q %q", code, out, errs)
	}
	code, out, _ = shoal(t, host, "events", "-f")
	if code != 0 || !strings.Contains(out, "cold start (queued=1)") {
		t.Fatalf("events -f: %d %q", code, out)
	}
}

// TestAppStatusNode: a cluster's replicas are listed with their node.
func TestAppStatusNode(t *testing.T) {
	host, fa := appDaemon(t)
	fa.app.Replicas = append(fa.app.Replicas, types.Replica{ID: "hello-def", Revision: 2, State: "starting", StartedAt: t0})
	fa.app.Replicas[0].Node = "n2"
	code, out, errs := shoal(t, host, "app", "status", "hello")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	lines := strings.Split(out, "\n")
	var head, row string
	for _, l := range lines {
		if strings.HasPrefix(l, "ID ") {
			head = l
		}
		if strings.HasPrefix(l, "hello-abc") {
			row = l
		}
	}
	if f := strings.Fields(head); len(f) < 4 || f[3] != "NODE" {
		t.Fatalf("header %q; want NODE after STATE", head)
	}
	if f := strings.Fields(row); len(f) < 4 || f[3] != "n2" {
		t.Fatalf("row %q; want node n2 after its state", row)
	}
}

// shoal app ls pages (--limit, --after) and filters (--state) through the
// API; a bad flag is a usage error (exit 2) naming it, sent nowhere.
func TestAppLsPaged(t *testing.T) {
	host, _ := appDaemon(t)
	code, out, errs := shoal(t, host, "app", "ls", "--limit", "1")
	if code != 0 || !strings.Contains(out, "hello:1") || !strings.Contains(errs, "more: shoal app ls --limit 1 --after hello") {
		t.Fatalf("ls --limit 1: %d %q %q", code, out, errs)
	}
	if code, out, errs := shoal(t, host, "app", "ls", "--after", "hello"); code != 0 || strings.Contains(out, "hello:1") {
		t.Fatalf("ls --after hello: %d %q %q; want no app", code, out, errs)
	}
	if code, out, errs := shoal(t, host, "app", "ls", "--state", "failing"); code != 0 || strings.Contains(out, "hello:1") {
		t.Fatalf("ls --state failing: %d %q %q; want no app", code, out, errs)
	}
	for _, args := range [][]string{{"--limit", "0"}, {"--limit", "-3"}, {"--limit", "10001"}, {"--state", "asleep"}, {"--limit", "x"}} {
		code, _, errs := shoal(t, host, append([]string{"app", "ls"}, args...)...)
		if code != 2 || !strings.Contains(errs, strings.TrimPrefix(args[0], "--")) {
			t.Errorf("ls %v: exit %d %q; want 2 naming the flag", args, code, errs)
		}
	}
}
