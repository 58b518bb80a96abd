package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/shoal-run/shoal/internal/api/types"
)

// dialWS opens a WebSocket to app's path through the proxy.
func dialWS(t *testing.T, proxy, app, path string) *websocket.Conn {
	t.Helper()
	cfg, err := websocket.NewConfig("ws://"+app+".localhost"+path, "http://"+app+".localhost/")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	ws, err := websocket.NewClient(cfg, c)
	if err != nil {
		c.Close()
		t.Fatalf("WebSocket handshake through the proxy: %v", err)
	}
	return ws
}

// echo sends msg on ws and returns the answer.
func echo(t *testing.T, ws *websocket.Conn, msg string) string {
	t.Helper()
	if err := websocket.Message.Send(ws, msg); err != nil {
		t.Fatalf("WebSocket send: %v", err)
	}
	var got string
	if err := websocket.Message.Receive(ws, &got); err != nil {
		t.Fatalf("WebSocket receive: %v", err)
	}
	if !strings.HasPrefix(got, msg+" from ") {
		t.Fatalf("WebSocket answer %q, want %q from a replica", got, msg)
	}
	return got
}

// holdsReplica watches the app for ten idle timeouts (300ms) while a stream
// is open: its one replica stays ready with a request in flight.
func (d *daemon) holdsReplica(what string) {
	d.t.Helper()
	d.waitApp("hello", what+" in flight", func(a types.App) bool {
		return len(a.Replicas) == 1 && a.Replicas[0].State == "ready" && a.Replicas[0].InFlight == 1
	})
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		a := d.app("hello")
		if len(a.Replicas) != 1 || a.Replicas[0].State != "ready" || a.Replicas[0].InFlight != 1 {
			d.t.Fatalf("with %s open past idle_timeout: %+v, want one ready replica with it in flight", what, a.Replicas)
		}
	}
}

// An open WebSocket and an open SSE stream through the proxy each count as
// a request in flight: the replica behind it stays ready past idle_timeout
// and the stream keeps flowing; once the client closes it, the replica
// freezes. The daemon's /metrics then counts the WebSocket's first byte as
// cold (it woke the app), the SSE stream's as frozen (it thawed the
// replica), the proxy's added latency, and the wake-up's scale decision.
func TestStreamsKeepReplicaFromIdleFreeze(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(manifest("300ms", "10m"))
	proxy := d.proxyAddr()

	ws := dialWS(t, proxy, "hello", "/ws")
	echo(t, ws, "one")
	d.holdsReplica("a WebSocket")
	echo(t, ws, "two")
	ws.Close()
	d.waitApp("hello", "the replica to freeze once the WebSocket closed", func(a types.App) bool { return replicasIn(a, "frozen") == 1 })

	req, _ := http.NewRequest(http.MethodGet, "http://"+proxy+"/sse", nil)
	req.Host = "hello.localhost"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("SSE through the proxy: %v", err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("SSE answer: %s %q", resp.Status, ct)
	}
	// The events are read as they come; the stream ends only when the
	// test closes it.
	var last atomic.Int64
	cut := make(chan error, 1)
	go func() {
		events := bufio.NewScanner(resp.Body)
		for events.Scan() {
			if n, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				i, _ := strconv.Atoi(strings.Fields(n)[0])
				last.Store(int64(i))
			}
		}
		cut <- events.Err()
	}()
	waitFor(t, "a first SSE event", func() bool { return last.Load() >= 1 })
	first := last.Load()
	d.holdsReplica("an SSE stream")
	// Events flowed all along (one every 100ms): the stream was neither
	// cut nor held back.
	select {
	case err := <-cut:
		t.Fatalf("the SSE stream was cut during the hold: %v", err)
	default:
	}
	if n := last.Load(); n <= first+10 {
		t.Fatalf("SSE events %d then %d across the hold, want more than ten between", first, n)
	}
	resp.Body.Close()
	d.waitApp("hello", "the replica to freeze once the SSE stream closed", func(a types.App) bool { return replicasIn(a, "frozen") == 1 })

	var m string
	want := []string{
		`shoal_proxy_first_byte_seconds_count{app="hello",tier="cold"} 1`,
		`shoal_proxy_first_byte_seconds_count{app="hello",tier="frozen"} 1`,
		`shoal_proxy_added_latency_seconds_count{app="hello"} 2`,
		`shoal_app_scale_decisions_total{app="hello",direction="out",reason="request_waiting"}`,
		`shoal_app_activation_seconds_count{app="hello",kind="thaw"} 1`,
	}
	waitFor(t, "the streams in the metrics", func() bool {
		m = d.getText("/metrics")
		for _, w := range want {
			if !strings.Contains(m, w) {
				return false
			}
		}
		return true
	})
}

// procMem reads a /proc/PID/status field in KiB (VmRSS, VmHWM).
func procMem(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// A 1 GiB upload streams through the proxy, with a length and chunked: the
// app reads all of it, and the proxy process's peak memory grows by less
// than 64 MiB over what it held before. The app's max_body lets it in.
func TestLargeUploadStreamsThroughProxy(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(manifest("10m", "10m") + "[resources]\nmax_body = \"2GiB\"\n")
	proxy := d.proxyAddr()
	if code, _, _ := get(t, proxy, "hello", "/"); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	procs := d.proxyProcs()
	if len(procs) != 1 {
		t.Fatalf("proxy processes of the daemon: %v, want one", procs)
	}
	pid := procs[0]
	const size = 1 << 30
	for _, chunked := range []bool{false, true} {
		before := procMem(t, pid, "VmRSS")
		var body io.Reader = io.LimitReader(zeros{}, size)
		if chunked {
			body = struct{ io.Reader }{body} // no length known: sent chunked
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+proxy+"/upload", body)
		req.Host = "hello.localhost"
		if !chunked {
			req.ContentLength = size
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("upload (chunked %v): %v", chunked, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != strconv.Itoa(size) {
			t.Fatalf("upload (chunked %v): %s %q, want the app to have read %d bytes", chunked, resp.Status, b, size)
		}
		peak := procMem(t, pid, "VmHWM")
		t.Logf("upload (chunked %v): proxy RSS %d KiB before, peak %d KiB", chunked, before, peak)
		if peak-before >= 64<<10 {
			t.Fatalf("upload (chunked %v): the proxy's peak RSS grew by %d KiB, want under 64 MiB", chunked, peak-before)
		}
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A WebSocket open on revision 1's replica outlives the rollout of
// revision 2: new requests go to revision 2 while the old replica, out of
// the route, keeps the WebSocket (in flight, still echoing) within its
// drain_timeout; once the client closes it, the old replica leaves service.
func TestWebSocketOutlivesRollout(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	drain := func(greeting string) string {
		return strings.Replace(revManifest(1, greeting), `idle_timeout = "10m"`, "idle_timeout = \"10m\"\ndrain_timeout = \"60s\"", 1)
	}
	if r, _ := d.deployFile(drain("v1")); r.code != 0 {
		t.Fatalf("deploy revision 1: %d %s", r.code, r.stderr)
	}
	d.waitApp("hello", "revision 1 ready", func(a types.App) bool { return len(pids(a, 1, "ready")) == 1 })
	proxy := d.proxyAddr()
	ws := dialWS(t, proxy, "hello", "/ws")
	defer ws.Close()
	first := echo(t, ws, "one")

	if r, _ := d.deployFile(drain("v2"), "--detach"); r.code != 0 {
		t.Fatalf("deploy --detach revision 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	oldHolds := func(a types.App) bool {
		for _, r := range a.Replicas {
			if r.Revision == 1 && r.State == "ready" && r.InFlight == 1 {
				return true
			}
		}
		return false
	}
	d.waitApp("hello", "revision 2 takes the traffic while revision 1 holds the WebSocket", func(a types.App) bool {
		return a.Revision == 2 && a.Rollout != nil && a.Rollout.State == types.RolloutDone &&
			len(pids(a, 2, "ready")) == 1 && oldHolds(a)
	})
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if a := d.app("hello"); !oldHolds(a) {
			t.Fatalf("revision 1's replica let go of the open WebSocket within its drain_timeout: %+v", a.Replicas)
		}
		if _, body, _ := get(t, proxy, "hello", "/"); !strings.HasPrefix(body, "v2 from ") {
			t.Fatalf("a new request during the drain: %q, want revision 2", body)
		}
	}
	if got, want := echo(t, ws, "two"), strings.Replace(first, "one", "two", 1); got != want {
		t.Fatalf("the WebSocket after the rollout answers %q, want %q (the same replica)", got, want)
	}
	ws.Close()
	d.waitApp("hello", "revision 1's replica to leave service once the WebSocket closed", func(a types.App) bool {
		return len(pids(a, 1, "ready")) == 0
	})
}

// A WebSocket still open when its replica's drain_timeout is over is closed
// by the proxy (the client reads the end of the connection), and the old
// replica leaves service.
func TestWebSocketClosedAfterDrainTimeout(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	drain := func(greeting string) string {
		return strings.Replace(revManifest(1, greeting), `idle_timeout = "10m"`, "idle_timeout = \"10m\"\ndrain_timeout = \"1s\"", 1)
	}
	if r, _ := d.deployFile(drain("v1")); r.code != 0 {
		t.Fatalf("deploy revision 1: %d %s", r.code, r.stderr)
	}
	d.waitApp("hello", "revision 1 ready", func(a types.App) bool { return len(pids(a, 1, "ready")) == 1 })
	ws := dialWS(t, d.proxyAddr(), "hello", "/ws")
	defer ws.Close()
	echo(t, ws, "one")
	closed := make(chan error, 1)
	go func() {
		var msg string
		closed <- websocket.Message.Receive(ws, &msg)
	}()
	if r, _ := d.deployFile(drain("v2")); r.code != 0 {
		t.Fatalf("deploy revision 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	select {
	case err := <-closed:
		if err != io.EOF {
			t.Fatalf("the WebSocket ended with %v, want the end of the connection", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the WebSocket is still open a minute after the rollout; its replica's drain_timeout is 1s")
	}
	d.waitApp("hello", "revision 1's replica to leave service", func(a types.App) bool { return len(pids(a, 1, "ready")) == 0 })
}
