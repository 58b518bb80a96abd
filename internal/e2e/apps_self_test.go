package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

const selfManifest = `
name = "web"
image = "hello:1"
port = 8080
[scale]
min = 1
max = %s
idle_timeout = "1m"
[health]
http = "/healthz"
`

func readyIDs(a types.App) []string {
	var ids []string
	for _, r := range a.Replicas {
		if r.State == "ready" {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// A replica asks for another one and gets a second ready replica that
// serves; the new replica then halts and dies under a steady load, and no
// request fails.
func TestSelfReplicateHaltDieUnderLoad(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(strings.Replace(selfManifest, "%s", "3", 1))
	a := d.waitApp("web", "one ready replica", func(a types.App) bool { return a.Ready == 1 })
	first := asReplica(t, a, readyIDs(a)[0])
	proxy := d.proxyAddr()
	s := startSteady(proxy, "web", "/", 4, 20000, 2*time.Millisecond)
	defer s.end()

	ans := first.call(t, "POST", "/v1/self/replicate", "")
	ans.expect(t, "replicate", 200, "")
	second := ans.str("replica", "id")
	if ans.str("replica", "state") != "ready" || second == "" || second == first.id {
		t.Fatalf("replicate answered %s", ans.raw)
	}
	a = d.waitApp("web", "two ready replicas", func(a types.App) bool { return a.Ready == 2 })
	waitFor(t, "the new replica serves", func() bool { return s.answered(second) > 20 })
	self := first.call(t, "GET", "/v1/self", "")
	self.expect(t, "GET /v1/self", 200, "")
	if self.str("id") != first.id || self.str("state") != "ready" || len(self.body["replicas"].([]any)) != 2 {
		t.Fatalf("GET /v1/self: %s", self.raw)
	}

	x := asReplica(t, a, second)
	x.call(t, "POST", "/v1/self/halt", "").expect(t, "halt", 200, "")
	a = d.waitApp("web", "the halted replica listed", func(a types.App) bool { return replicasIn(a, "halted") == 1 })
	time.Sleep(100 * time.Millisecond) // requests sent before the halt finish
	settled := s.answered(second)
	time.Sleep(300 * time.Millisecond)
	if n := s.answered(second); n != settled {
		t.Fatalf("a halted replica answered %d more requests", n-settled)
	}
	x.call(t, "POST", "/v1/self/die", "").expect(t, "die", 202, "")
	d.waitApp("web", "the dead replica gone", func(a types.App) bool { return len(a.Replicas) == 1 && a.Ready == 1 })
	time.Sleep(300 * time.Millisecond) // the load goes on after the stop
	s.end()
	if s.failed != 0 {
		t.Fatalf("%d of %d requests failed through replicate, halt and die; first: %s", s.failed, s.n, s.first)
	}
	if s.n < 200 {
		t.Fatalf("only %d requests sent", s.n)
	}
	// Every call is an event naming the replica that made it.
	calls := map[string]string{}
	for _, e := range d.events("web", "self") {
		calls[strings.SplitN(e.Reason, ":", 2)[0]] = e.Replica
	}
	if calls["replicate"] != first.id || calls["get"] != first.id || calls["halt"] != second || calls["die"] != second {
		t.Fatalf("self events: %v", calls)
	}
	t.Logf("%d requests, none failed", s.n)
}

// Forged, expired and foreign tokens are refused, and so are calls past
// the app's bounds and its rate limit, each with a JSON reason and an
// event.
func TestSelfRefusals(t *testing.T) {
	d := startDaemon(t)
	first, second := d.selfPair(t, 2)

	first.call(t, "POST", "/v1/self/replicate", "").expect(t, "replicate beyond max", 409, "max")
	forged := strings.Repeat("A", 43)
	selfCall(t, first.url, forged, first.pid, "GET", "/v1/self", "").expect(t, "forged token", 401, "unauthorized")
	selfCall(t, first.url, "", first.pid, "GET", "/v1/self", "").expect(t, "no token", 401, "unauthorized")
	selfCall(t, first.url, first.token, second.pid, "POST", "/v1/self/die", "").expect(t, "token from another replica's address", 403, "forbidden")
	selfCall(t, first.url, first.token, 0, "GET", "/v1/self", "").expect(t, "token from the host", 403, "forbidden")
	first.call(t, "POST", "/v1/self/halt?app=shop", "").expect(t, "naming another app", 403, "forbidden")
	first.call(t, "POST", "/v1/self/die", `{"replica":"`+second.id+`"}`).expect(t, "naming another replica", 403, "forbidden")
	if a := d.app("web"); a.Ready != 2 {
		t.Fatalf("refused calls changed the app: %+v", a.Replicas)
	}

	second.call(t, "POST", "/v1/self/die", "").expect(t, "die", 202, "")
	d.waitApp("web", "one replica", func(a types.App) bool { return len(a.Replicas) == 1 })
	selfCall(t, second.url, second.token, first.pid, "GET", "/v1/self", "").expect(t, "token of a gone replica", 401, "unauthorized")
	first.call(t, "POST", "/v1/self/die", "").expect(t, "die below min", 409, "min")
	first.call(t, "POST", "/v1/self/halt", "").expect(t, "halt below min", 409, "min")
	// Scaling calls have a budget per app: once spent, 409 "rate".
	var last selfAnswer
	for i := 0; i < 20 && last.str("reason") != "rate"; i++ {
		last = first.call(t, "POST", "/v1/self/halt", "")
	}
	last.expect(t, "halt past the rate limit", 409, "rate")
	if a := d.app("web"); a.Ready != 1 {
		t.Fatalf("refused calls changed the app: %+v", a.Replicas)
	}
	// The event log is written in the background, in order: the refusal
	// answered last is the last to be listed.
	reasons := ""
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		reasons = ""
		for _, e := range d.events("web", "self-refused") {
			reasons += e.Replica + " " + e.Reason + "\n"
		}
		if strings.Contains(reasons, "rate limit") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{"max is 2", "which is gone", "not from the replica's own address", "names app shop", "its min is 1", "rate limit"} {
		if !strings.Contains(reasons, want) {
			t.Errorf("no refusal event says %q:\n%s", want, reasons)
		}
	}
	if !strings.Contains(d.log.String(), "self API: call refused") {
		t.Error("refusals are not logged")
	}
}

// An app scaled on its own metric grows to what its replicas publish.
func TestSelfMetricDrivesAutoscaler(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(`
name = "queue"
image = "hello:1"
port = 8080
[scale]
min = 1
max = 4
metric = "queue"
target = 10
[health]
http = "/healthz"
`)
	a := d.waitApp("queue", "one ready replica", func(a types.App) bool { return a.Ready == 1 })
	x := asReplica(t, a, readyIDs(a)[0])
	x.call(t, "POST", "/v1/self/metrics", `{"name":"queue","value":35}`).expect(t, "metrics", 200, "")
	d.waitApp("queue", "four ready replicas for a queue of 35 at 10 each", func(a types.App) bool { return a.Ready == 4 })
	// The published 35 reaches 4 replicas in one step or, on a loaded
	// host where the panic window also averages the samples before it
	// (1 → 3 at 21.0, then 3 → 4), in two: a scale-out names the metric
	// and its target either way.
	found := false
	for _, e := range d.events("queue", "scale") {
		found = found || (strings.Contains(e.Reason, "metric queue") && strings.Contains(e.Reason, "at target 10"))
	}
	if !found {
		t.Fatalf("no scale event names the metric: %+v", d.events("queue", "scale"))
	}
	x.call(t, "POST", "/v1/self/metrics", `{"name":"queue","value":-2}`).expect(t, "negative metric", 400, "invalid")
}

// A replica's token outlives a daemon killed with SIGKILL: the next daemon
// knows it from the hash in the replica's record, keeps a halted replica
// out of the route, and the store never held the token itself.
func TestSelfTokenSurvivesRestart(t *testing.T) {
	d := startDaemon(t)
	first, second := d.selfPair(t, 3)
	second.call(t, "POST", "/v1/self/halt", "").expect(t, "halt", 200, "")
	d.waitApp("web", "the halted replica recorded", func(a types.App) bool { return replicasIn(a, "halted") == 1 })
	time.Sleep(200 * time.Millisecond) // the record is written after the answer
	d.stop(syscall.SIGKILL)
	db, err := os.ReadFile(filepath.Join(d.dataDir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []*inReplica{first, second} {
		if strings.Contains(string(db), x.token) {
			t.Fatalf("the store holds replica %s's token", x.id)
		}
	}
	d.start()
	d.waitApp("web", "the replicas adopted", func(a types.App) bool { return a.Ready == 1 && replicasIn(a, "halted") == 1 })
	self := first.call(t, "GET", "/v1/self", "")
	self.expect(t, "GET /v1/self after a restart", 200, "")
	if self.str("id") != first.id {
		t.Fatalf("after a restart the token names %s", self.raw)
	}
	for i := 0; i < 20; i++ {
		if _, _, rep := get(t, d.proxyAddr(), "web", "/"); rep == second.id {
			t.Fatalf("the halted replica %s is routed after a restart", rep)
		}
	}
	second.call(t, "POST", "/v1/self/die", "").expect(t, "die after a restart", 202, "")
	d.waitApp("web", "the halted replica gone", func(a types.App) bool { return len(a.Replicas) == 1 })
}
