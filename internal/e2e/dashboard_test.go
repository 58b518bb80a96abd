package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/shoal-run/shoal/internal/api/types"
)

// browser is a headless Chromium showing one page.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// openBrowser starts Debian's chromium (scripts/install-deps.sh test
// installs it) headless with a fresh profile.
func openBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is needed (scripts/install-deps.sh test installs it): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-extensions", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser; it lives as long as ctx.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

// do runs actions, failing the test on an error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression that gives a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor waits (at most a minute) until the page's expression is true,
// without reloading it.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(time.Minute)))
	if err != nil {
		b.t.Fatalf("the page never showed %s: %v\npage text:\n%s", what, err, b.eval(`document.body.innerText`))
	}
}

// screenshot saves the page as a PNG in $SHOAL_UI_SCREENSHOTS, if set.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("SHOAL_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), png, 0o644)
	}
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
}

// uiURL is the dashboard's address, from the daemon's notes.
func (d *daemon) uiURL() string {
	d.t.Helper()
	var h types.Health
	if err := json.Unmarshal([]byte(d.must("info", "--output", "json")), &h); err != nil {
		d.t.Fatalf("info: %v", err)
	}
	for _, n := range h.Notes {
		if rest, ok := strings.CutPrefix(n, "dashboard at "); ok {
			return strings.Fields(rest)[0]
		}
	}
	d.t.Fatalf("info names no dashboard: %q", h.Notes)
	return ""
}

// The dashboard, opened once in a real browser with the API token, shows a
// replica appear under traffic, freeze when the app is idle and thaw on the
// next request, with the events behind each change and the job queue by
// tenant, all through its live stream: the page is never reloaded.
func TestDashboardShowsReplicaLifecycle(t *testing.T) {
	d := startDaemon(t, "--ui", "127.0.0.1:0")
	d.exampleImage("hello")
	d.busybox("busybox:1")
	d.deploy(manifest("1s", "10m"))
	proxy := d.proxyAddr()
	tok, err := os.ReadFile(filepath.Join(d.dataDir, "api-token"))
	if err != nil {
		t.Fatal(err)
	}
	b := openBrowser(t)
	b.do("open the dashboard with the token", chromedp.Navigate(d.uiURL()+"?token="+strings.TrimSpace(string(tok))))
	if u := b.eval(`location.href`); strings.Contains(u, "token") {
		t.Fatalf("the token stayed in the address: %s", u)
	}
	b.waitFor("the live stream connected", `document.querySelector("#live.on") !== null`)
	b.waitFor("app hello with no replica", `document.querySelector('article[data-app="hello"]') !== null &&
		document.querySelectorAll('article[data-app="hello"] .replica').length === 0`)
	// A reload would lose this mark.
	b.eval(`window.shoalMark = "same page"`)

	// Traffic starts a replica; the page shows it ready.
	load := startSteady(proxy, "hello", "/", 2, 3000, 20*time.Millisecond)
	b.waitFor("a ready replica", `document.querySelector('article[data-app="hello"] .replica[data-state="ready"]') !== null`)
	id := b.eval(`document.querySelector('article[data-app="hello"] .replica[data-state="ready"]').dataset.replica`)
	b.waitFor("requests in the chart", `parseFloat(document.querySelector('article[data-app="hello"] .chart .key.c1 b').textContent) > 0`)
	b.screenshot("dashboard.png")
	load.end()
	if load.failed != 0 {
		t.Fatalf("%d requests failed; first: %s", load.failed, load.first)
	}

	// Idle for idle_timeout (1s): the same replica freezes.
	sel := fmt.Sprintf(`article[data-app="hello"] .replica[data-replica=%q]`, id)
	b.waitFor("the replica frozen", `document.querySelector('`+sel+`[data-state="frozen"]') !== null`)
	b.waitFor("its freeze event", `document.querySelector('#events tr[data-kind="freeze"]') !== null`)

	// The next requests thaw it.
	thaw := startSteady(proxy, "hello", "/", 1, 1500, 20*time.Millisecond)
	b.waitFor("the replica thawed", `document.querySelector('`+sel+`[data-state="ready"]') !== null`)
	b.waitFor("its thaw event", `document.querySelector('#events tr[data-kind="thaw"]') !== null`)
	thaw.end()
	if thaw.failed != 0 || thaw.answered(id) == 0 {
		t.Fatalf("after the freeze: %d failed (first %s), answers by replica %v, want the thawed %s", thaw.failed, thaw.first, thaw.by, id)
	}

	// Jobs queue past the slots: the page shows them by tenant.
	var batch []types.JobRequest
	for i := 0; i < 12; i++ {
		tenant := []string{"course-a", "course-b"}[i%2]
		batch = append(batch, types.JobRequest{Image: "busybox:1", Tenant: tenant,
			Steps: []types.JobStep{{Args: []string{"sleep", "2"}}}})
	}
	f := filepath.Join(t.TempDir(), "batch.json")
	js, _ := json.Marshal(batch)
	if err := os.WriteFile(f, js, 0o644); err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(d.must("job", "submit", "-f", f))
	b.waitFor("jobs by tenant", `document.querySelector('#jobs tr[data-tenant="course-a"]') !== null &&
		document.querySelector('#jobs tr[data-tenant="course-b"]') !== null`)
	b.screenshot("dashboard-jobs.png")
	for _, id := range ids {
		d.must("job", "get", "--wait", id)
	}
	b.waitFor("the job queue empty", `document.querySelector('#jobs tr[data-tenant]') === null`)

	if mark := b.eval(`String(window.shoalMark)`); mark != "same page" {
		t.Fatalf("the page was reloaded (mark %q)", mark)
	}
	if n, _ := strconv.Atoi(b.eval(`String(document.querySelectorAll("#events tr").length)`)); n < 4 {
		t.Fatalf("%d events on the page", n)
	}
	checkGrafanaMetrics(t, d.getText("/metrics"))
}

// checkGrafanaMetrics fails for a metric that contrib/grafana/shoal.json
// asks for and the daemon does not expose. Two families have no series
// until a replica fails or its CPU quota changes, which this run does not
// make happen.
func checkGrafanaMetrics(t *testing.T, metrics string) {
	t.Helper()
	dash, err := os.ReadFile("../../contrib/grafana/shoal.json")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`\b(?:shoal|process)_[a-z_]+`)
	exposed := map[string]bool{"shoal_app_replica_failures_total": true, "shoal_app_cpu_changes_total": true}
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, "#") {
			exposed[name.FindString(line)] = true
		}
	}
	used := name.FindAllString(string(dash), -1)
	if len(used) < 10 {
		t.Fatalf("the Grafana dashboard names %d metrics", len(used))
	}
	for _, m := range used {
		if !exposed[m] {
			t.Errorf("the Grafana dashboard asks for %s, which /metrics does not have", m)
		}
	}
}
