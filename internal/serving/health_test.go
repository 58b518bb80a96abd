package serving

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/route"
)

// healthNet hands each replica its own loopback address, where a listener
// on the app's port answers its health checks until the test makes the
// replica sick.
type healthNet struct {
	mu   sync.Mutex
	port int
	n    int
	ls   map[string]net.Listener
}

func (h *healthNet) Acquire(_ context.Context, id string, _ network.Mode) (*network.Attachment, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	ip := net.IPv4(127, 0, 0, byte(1+h.n))
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(h.port)))
	if err != nil {
		return nil, err
	}
	go http.Serve(l, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	h.ls[id] = l
	return &network.Attachment{ID: id, IP: ip}, nil
}

func (h *healthNet) Lookup(string) (*network.Attachment, bool)           { return nil, false }
func (h *healthNet) SetPolicy(*network.Attachment, network.Policy) error { return nil }

func (h *healthNet) Release(_ context.Context, a *network.Attachment) error {
	h.sick(a.ID)
	return nil
}

// sick makes replica id fail its health checks from now on.
func (h *healthNet) sick(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.ls[id]; l != nil {
		l.Close()
		delete(h.ls, id)
	}
}

func (h *healthNet) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, l := range h.ls {
		l.Close()
		delete(h.ls, id)
	}
}

// A replica that fails its health checks with a request in flight counts
// as a failure and is replaced at once, but it drains: it is stopped only
// when the request is done or drain_timeout has passed.
func TestUnhealthyReplicaDrains(t *testing.T) {
	for _, finish := range []bool{true, false} {
		name := "request finishes"
		if !finish {
			name = "drain timeout"
		}
		t.Run(name, func(t *testing.T) {
			hn := &healthNet{ls: map[string]net.Listener{}}
			h := newHarnessWith(t, 1<<40, hn)
			t.Cleanup(hn.closeAll)
			hn.mu.Lock()
			hn.port = h.port
			hn.mu.Unlock()
			h.deploy("min = 1\nmax = 1\ndrain_timeout = \"10s\"", "[health]\ninterval = \"1s\"\nfailures = 2")
			h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
			old := h.replicas()[StateReady][0]
			h.r.setLoad(route.Load{InFlight: 1, LastRequest: h.clock.Now(),
				Endpoints: map[string]route.EndpointLoad{old: {InFlight: 1, LastRequest: h.clock.Now()}}})

			hn.sick(old)
			h.advanceUntil("the unhealthy replica drains", time.Second, func() bool {
				return slices.Contains(h.replicas()[StateDraining], old)
			})
			failedAt := h.clock.Now()
			h.wait("the failure is recorded", func() bool { return len(h.ev.of("fail")) > 0 })
			if evs := h.ev.of("fail"); len(evs) != 1 || evs[0].Replica != old || !strings.Contains(evs[0].Reason, "health") {
				t.Fatalf("fail events: %+v", evs)
			}
			a, _ := h.m.Get(context.Background(), "hello")
			if i := slices.IndexFunc(a.Replicas, func(r types.Replica) bool { return r.ID == old }); i < 0 || !strings.Contains(a.Replicas[i].Reason, "health") {
				t.Fatalf("app while its replica drains: replicas %+v", a.Replicas)
			}
			h.advanceUntil("the replacement is ready", tick, func() bool {
				r := h.replicas()[StateReady]
				return len(r) == 1 && r[0] != old
			})
			if d := h.clock.Since(failedAt); d > time.Second {
				t.Fatalf("replacement ready %s after the failure, want within the back-off's first steps", d)
			}
			if _, err := h.rt.get(old); err != nil {
				t.Fatalf("unhealthy replica stopped with a request in flight: %v", err)
			}
			if got := h.replicas()[StateDraining]; !slices.Equal(got, []string{old}) {
				t.Fatalf("draining replicas %v, want [%s]", got, old)
			}

			gone := func() bool {
				_, err := h.rt.get(old)
				r := h.replicas()
				return err != nil && len(r) == 1 && len(r[StateReady]) == 1
			}
			if finish {
				h.r.setLoad(route.Load{LastRequest: h.clock.Now()})
				h.wait("the drained replica is stopped", gone)
				return
			}
			// Short of drain_timeout it stays; past it, it is stopped.
			h.clock.Set(failedAt.Add(9 * time.Second))
			time.Sleep(20 * time.Millisecond)
			if _, err := h.rt.get(old); err != nil {
				t.Fatalf("unhealthy replica stopped before drain_timeout with a request in flight: %v", err)
			}
			h.advanceUntil("the replica is stopped after drain_timeout", time.Second, gone)
		})
	}
}

// A command check runs in the replica's container: a new replica is routed
// once its port answers and the command passes; a ready replica whose
// command fails leaves the route at the first failure (failure_threshold
// 1), comes back when it passes, and after failures more in a row is
// replaced, with the command's exit code and output in the reason.
func TestCommandHealthCheck(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\nmax = 1", "[health]\ncommand = [\"/bin/check\", \"-q\"]\ninterval = \"1s\"\nfailures = 2\nfailure_threshold = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	old := h.replicas()[StateReady][0]
	if n := h.rt.execs(old); n != 1 {
		t.Fatalf("%d health commands before the replica was ready, want 1", n)
	}
	h.rt.setSick(old, true)
	h.advanceUntil("the replica leaves the route", time.Second, func() bool { return len(h.r.endpoints("hello")) == 0 })
	h.rt.setSick(old, false)
	h.advanceUntil("the replica is back in the route", time.Second, func() bool { return len(h.r.endpoints("hello")) == 1 })
	h.recorded()
	if evs := h.ev.of("fail"); len(evs) != 0 {
		t.Fatalf("one failed check counted as a failure: %+v", evs)
	}
	h.rt.setSick(old, true)
	h.advanceUntil("the replica is replaced", time.Second, func() bool {
		r := h.replicas()[StateReady]
		return len(r) == 1 && r[0] != old
	})
	h.wait("the failure is recorded", func() bool { return len(h.ev.of("fail")) == 1 })
	if e := h.ev.of("fail")[0]; e.Replica != old || !strings.Contains(e.Reason, `command "/bin/check" exited with code 1: /bin/check: no`) {
		t.Fatalf("fail event %+v", e)
	}
}

// A ready replica leaves the route only after failure_threshold failed
// checks in a row, with an event saying so, and is back after
// success_threshold passed ones, with an event too; out of the route, it
// is replaced after failures more. While it answers real traffic only
// one interval in provenEvery has a check: a busy replica whose checks
// time out stays routed ten times as long.
func TestHealthThresholds(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\nmax = 1", "[health]\ncommand = [\"/bin/check\"]\ninterval = \"1s\"\nfailures = 2\nsuccess_threshold = 2")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	ctl := h.m.app("hello")
	ctl.mu.Lock()
	r := ctl.reps[id]
	ctl.mu.Unlock()
	h.wait("the health loop", func() bool { return r.armedAt.Load() > 0 })
	var answered uint64
	// step moves the clock one interval, in which the replica answered
	// traffic or not, and waits until the health loop is done with it;
	// checked says whether the interval had a check.
	step := func(answer, checked bool) {
		t.Helper()
		n := h.rt.execs(id)
		if answer {
			answered++
			h.r.setLoad(route.Load{Endpoints: map[string]route.EndpointLoad{id: {Answered: answered}}})
		}
		h.clock.Advance(time.Second)
		at := h.clock.Now().UnixNano()
		h.wait("the health loop's interval", func() bool { return r.armedAt.Load() >= at })
		want := n
		if checked {
			want++
		}
		if got := h.rt.execs(id); got != want {
			t.Fatalf("%d health checks in an interval (answered traffic: %v), want %d", got-n, answer, want-n)
		}
	}
	routed := func() bool { return slices.Equal(h.r.endpoints("hello"), []string{id}) }
	healthEvents := func() []string {
		h.recorded()
		var out []string
		for _, e := range h.ev.of("health") {
			if e.Replica != id {
				t.Fatalf("health event of %s: %+v", e.Replica, e)
			}
			out = append(out, e.Reason)
		}
		return out
	}

	h.rt.setSick(id, true)
	step(false, true)
	step(false, true)
	if !routed() {
		t.Fatalf("the replica left the route after 2 failed checks; route %v", h.r.endpoints("hello"))
	}
	h.rt.setSick(id, false)
	step(false, true)
	h.rt.setSick(id, true)
	// Busy: while it answers traffic, one interval in provenEvery has a
	// check; the others count neither way.
	for range 2 {
		for range provenEvery - 1 {
			step(true, false)
		}
		step(true, true)
		if !routed() {
			t.Fatalf("a replica answering traffic left the route after a failed check; route %v", h.r.endpoints("hello"))
		}
	}
	if evs := healthEvents(); len(evs) != 0 {
		t.Fatalf("health events of a routed replica: %q", evs)
	}
	// The third check failed in a row takes it out, answers or not.
	for range provenEvery - 1 {
		step(true, false)
	}
	step(true, true)
	h.wait("the replica leaves the route", func() bool { return len(h.r.endpoints("hello")) == 0 })
	if evs := healthEvents(); len(evs) != 1 || !strings.Contains(evs[0], "out of the route: 3 health checks failed in a row") {
		t.Fatalf("health events: %q", evs)
	}
	// Out of the route with nothing in flight, the proxy lists it no more;
	// listed again, its count is the one before: no answer, no proof.
	h.r.setLoad(route.Load{})
	h.rt.setSick(id, false)
	step(false, true)
	if routed() {
		t.Fatalf("back in the route after 1 passed check of success_threshold 2")
	}
	h.r.setLoad(route.Load{Endpoints: map[string]route.EndpointLoad{id: {Answered: answered}}})
	step(false, true)
	h.wait("the replica is back in the route", routed)
	if evs := healthEvents(); len(evs) != 2 || !strings.Contains(evs[1], "back in the route: 2 health checks passed") {
		t.Fatalf("health events: %q", evs)
	}
	// Out of the route, failures (2) more failed checks replace it.
	h.r.setLoad(route.Load{})
	h.rt.setSick(id, true)
	for range 4 {
		step(false, true)
	}
	if !slices.Contains(h.replicas()[StateReady], id) || len(h.ev.of("fail")) != 0 {
		t.Fatalf("replaced after 4 failed checks, want 3 (out of the route) + 2; replicas %v", h.replicas())
	}
	h.clock.Advance(time.Second)
	h.wait("the replica is replaced", func() bool { return len(h.ev.of("fail")) == 1 })
	if e := h.ev.of("fail")[0]; e.Replica != id || !strings.Contains(e.Reason, "failed 5 health checks") {
		t.Fatalf("fail event %+v", e)
	}
}

// healthCount's verdicts, check by check ("+" passed, "-" failed).
func TestHealthCountVerdicts(t *testing.T) {
	v := map[healthVerdict]string{healthStay: ".", healthLeave: "L", healthBack: "B", healthReplace: "R"}
	cases := []struct {
		name                     string
		leaveAt, backAt, replace int
		checks, want             string
	}{
		{"defaults of an old record", 0, 0, 3, "--+---+---", ".....LB..L"},
		{"a failure between passes", 3, 1, 3, "-+-+-+--+", "........."},
		{"back after success_threshold", 2, 3, 9, "--++-+++", ".L.....B"},
		{"replaced after failures more", 2, 1, 3, "-----", ".L..R"},
		{"a pass out of the route restarts liveness", 1, 2, 2, "-+-+--", "L....R"},
		{"threshold 1", 1, 1, 1, "-+-", "LBL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := manifest.Health{FailureThreshold: c.leaveAt, SuccessThreshold: c.backAt, Failures: c.replace}
			var hc healthCount
			got := ""
			for _, ch := range c.checks {
				got += v[hc.observe(ch == '+', h)]
			}
			if got != c.want {
				t.Fatalf("checks %s: verdicts %s, want %s", c.checks, got, c.want)
			}
		})
	}
}
