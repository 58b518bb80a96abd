package serving

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// newSelfHarness is a harness whose replicas get the self API.
func newSelfHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.m.o.SelfURL = "http://192.0.2.1:7071"
	return h
}

// caller is the self API's caller for replica id, found by its token as
// the container was given it.
func (h *harness) caller(id string) appapi.Caller {
	h.t.Helper()
	c, err := h.rt.get(id)
	if err != nil {
		h.t.Fatal(err)
	}
	var tok, url string
	for _, e := range c.spec.Env {
		if v, ok := strings.CutPrefix(e, appapi.EnvToken+"="); ok {
			tok = v
		}
		if v, ok := strings.CutPrefix(e, appapi.EnvURL+"="); ok {
			url = v
		}
	}
	if tok == "" || url != h.m.o.SelfURL {
		h.t.Fatalf("replica %s has no token or the wrong URL %q in its environment", id, url)
	}
	cl, ok := h.m.SelfAPI().Identify(appapi.HashToken(tok))
	if !ok || cl.Gone || cl.Replica != id || cl.App != "hello" || !cl.IP.Equal([]byte{127, 0, 0, 1}) {
		h.t.Fatalf("token of %s identifies %+v (%v)", id, cl, ok)
	}
	return cl
}

func refusal(t *testing.T, err error, reason string) {
	t.Helper()
	var r *appapi.Refusal
	if !errors.As(err, &r) || r.Reason != reason {
		t.Fatalf("got %v, want a refusal for %q", err, reason)
	}
}

// Each replica gets its own token; the store keeps only its hash.
func TestSelfTokens(t *testing.T) {
	h := newSelfHarness(t)
	h.deploy("min = 2")
	h.wait("two replicas", func() bool { return len(h.replicas()[StateReady]) == 2 })
	ids := h.replicas()[StateReady]
	a, b := h.caller(ids[0]), h.caller(ids[1])
	if a.Replica == b.Replica {
		t.Fatal("two replicas share a token")
	}
	var kvs []store.KV
	h.wait("both records written", func() bool {
		kvs, _ = h.m.o.Store.List(context.Background(), store.ReplicasPrefix("hello"))
		return len(kvs) == 2 && strings.Contains(string(kvs[0].Value), `"ready"`) && strings.Contains(string(kvs[1].Value), `"ready"`)
	})
	for _, kv := range kvs {
		c, _ := h.rt.get(strings.TrimPrefix(kv.Key, store.ReplicasPrefix("hello")))
		for _, e := range c.spec.Env {
			if tok, ok := strings.CutPrefix(e, appapi.EnvToken+"="); ok {
				if strings.Contains(string(kv.Value), tok) || !strings.Contains(string(kv.Value), appapi.HashToken(tok)) {
					t.Fatalf("record %s holds the token or not its hash: %s", kv.Key, kv.Value)
				}
			}
		}
	}
	if _, ok := h.m.SelfAPI().Identify(appapi.HashToken("forged")); ok {
		t.Fatal("a forged token identifies a replica")
	}
}

// replicate starts a replica when none is frozen, and the app's request
// keeps it: the autoscaler, which sees no load, does not freeze it until
// the app has been idle for idle_timeout.
func TestSelfReplicateHolds(t *testing.T) {
	h := newSelfHarness(t)
	h.deploy("min = 1\nmax = 2\nidle_timeout = \"30s\"")
	h.wait("one replica", func() bool { return len(h.replicas()[StateReady]) == 1 })
	first := h.replicas()[StateReady][0]
	c := h.caller(first)
	res, err := h.m.SelfAPI().Replicate(context.Background(), c, true)
	if err != nil || res.How != "started" || State(res.Replica.State) != StateReady {
		t.Fatalf("replicate: %+v %v", res, err)
	}
	if eps := h.r.endpoints("hello"); len(eps) != 2 {
		t.Fatalf("route after replicate: %v", eps)
	}
	_, err = h.m.SelfAPI().Replicate(context.Background(), c, true)
	refusal(t, err, "max")
	for i := 0; i < 25; i++ {
		h.advance(time.Second)
	}
	if got := h.replicas()[StateReady]; len(got) != 2 {
		t.Fatalf("the autoscaler undid the app's replicate within idle_timeout: %v", h.replicas())
	}
	h.advanceUntil("the idle second replica freezes", time.Second, func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	// Now a replicate thaws the frozen one.
	res, err = h.m.SelfAPI().Replicate(context.Background(), h.caller(h.replicas()[StateReady][0]), false)
	if err != nil || res.How != "thawed" || State(res.Replica.State) != StateReady {
		t.Fatalf("replicate with a frozen replica: %+v %v", res, err)
	}
	if len(h.replicas()[StateReady]) != 2 {
		t.Fatalf("after the thaw: %v", h.replicas())
	}
}

// A halted replica leaves the route and never comes back into it; the
// app's min bounds halt and die; die drains before the stop.
func TestSelfHaltDie(t *testing.T) {
	h := newSelfHarness(t)
	h.deploy("min = 1\nmax = 3")
	h.wait("one replica", func() bool { return len(h.replicas()[StateReady]) == 1 })
	first := h.replicas()[StateReady][0]
	_, err := h.m.SelfAPI().Halt(context.Background(), h.caller(first))
	refusal(t, err, "min")
	_, err = h.m.SelfAPI().Die(context.Background(), h.caller(first))
	refusal(t, err, "min")
	res, err := h.m.SelfAPI().Replicate(context.Background(), h.caller(first), true)
	if err != nil {
		t.Fatal(err)
	}
	second := res.Replica.ID
	c := h.caller(second)
	// A request is in flight to the second replica when it halts.
	h.r.setLoad(route.Load{InFlight: 1, Endpoints: map[string]route.EndpointLoad{second: {InFlight: 1}}})
	if res, err := h.m.SelfAPI().Halt(context.Background(), c); err != nil || State(res.Replica.State) != StateHalted {
		t.Fatalf("halt: %+v %v", res, err)
	}
	for i := 0; i < 30; i++ {
		h.advance(time.Second)
		if eps := h.r.endpoints("hello"); !slices.Equal(eps, []string{first}) {
			t.Fatalf("route with a halted replica: %v", eps)
		}
	}
	if got := h.replicas()[StateHalted]; !slices.Equal(got, []string{second}) {
		t.Fatalf("halted replica: %v", h.replicas())
	}
	if res, err := h.m.SelfAPI().Die(context.Background(), c); err != nil || State(res.Replica.State) != StateDraining {
		t.Fatalf("die: %+v %v", res, err)
	}
	time.Sleep(20 * time.Millisecond)
	if ctr, _ := h.rt.get(second); ctr == nil {
		t.Fatal("stopped with a request in flight")
	}
	h.r.setLoad(route.Load{})
	// Its container goes first, then its token and its place in the list.
	h.wait("the dead replica is removed", func() bool {
		_, err := h.rt.get(second)
		return err != nil && !slices.Contains(slices.Concat(slices.Collect(maps.Values(h.replicas()))...), second)
	})
	if cl, ok := h.m.SelfAPI().Identify(appapi.HashToken(tokenOf(h, first))); !ok || cl.Gone {
		t.Fatalf("the first replica's token: %+v", cl)
	}
	if !slices.Equal(h.replicas()[StateReady], []string{first}) || len(h.replicas()) != 1 {
		t.Fatalf("after die: %v", h.replicas())
	}
	if _, err := h.m.SelfAPI().Halt(context.Background(), c); err == nil {
		t.Fatal("a dead replica's call was accepted")
	}
}

func tokenOf(h *harness, id string) string {
	c, _ := h.rt.get(id)
	for _, e := range c.spec.Env {
		if v, ok := strings.CutPrefix(e, appapi.EnvToken+"="); ok {
			return v
		}
	}
	return ""
}

// With [scale] metric, what the replicas publish drives the count.
func TestSelfMetricScales(t *testing.T) {
	h := newSelfHarness(t)
	h.deploy("min = 1\nmax = 5\nmetric = \"queue\"\ntarget = 10")
	h.wait("one replica", func() bool { return len(h.replicas()[StateReady]) == 1 })
	c := h.caller(h.replicas()[StateReady][0])
	if err := h.m.SelfAPI().Metric(context.Background(), c, "queue", 35); err != nil {
		t.Fatal(err)
	}
	h.advanceUntil("four replicas for queue 35 at target 10", 100*time.Millisecond,
		func() bool { return len(h.replicas()[StateReady]) == 4 })
	self, err := h.m.SelfAPI().Self(context.Background(), c)
	if err != nil || len(self.Replicas) != 4 || self.Metrics["queue"] != 35 || State(self.State) != StateReady {
		t.Fatalf("self: %+v %v", self, err)
	}
	ev := h.ev.of("scale")
	if last := ev[len(ev)-1]; !strings.Contains(last.Reason, "metric queue") {
		t.Fatalf("scale event: %q", last.Reason)
	}
	// The value is no longer counted once it is older than metricTTL, and
	// the app shrinks back to min.
	h.advanceUntil("back to one replica", 2*time.Second, func() bool { return len(h.replicas()[StateReady]) == 1 })
}

// Halted replicas still run, so they count toward max: an app cannot halt
// and replicate its way past it, and the autoscaler keeps to what is left.
func TestSelfHaltedCountTowardMax(t *testing.T) {
	h := newSelfHarness(t)
	h.deploy("min = 1\nmax = 2\ntarget_concurrency = 1")
	h.wait("one replica", func() bool { return len(h.replicas()[StateReady]) == 1 })
	first := h.replicas()[StateReady][0]
	res, err := h.m.SelfAPI().Replicate(context.Background(), h.caller(first), true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.SelfAPI().Halt(context.Background(), h.caller(res.Replica.ID)); err != nil {
		t.Fatal(err)
	}
	_, err = h.m.SelfAPI().Replicate(context.Background(), h.caller(first), true)
	refusal(t, err, "max")
	// Load that wants both replicas gets only the one max leaves.
	h.r.setLoad(route.Load{InFlight: 10, LastRequest: h.clock.Now()})
	for i := 0; i < 20; i++ {
		h.advance(tick)
	}
	if got := h.replicas(); len(got[StateReady]) != 1 || len(got[StateHalted]) != 1 || len(got) != 2 {
		t.Fatalf("max 2 with one halted replica under load: %v", got)
	}
}

// Without the self API (--self-api-port -1), replicas get neither URL nor
// token, and their records no hash.
func TestSelfOff(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1")
	h.wait("one replica", func() bool { return len(h.replicas()[StateReady]) == 1 })
	c, _ := h.rt.get(h.replicas()[StateReady][0])
	for _, e := range c.spec.Env {
		if strings.HasPrefix(e, "SHOAL_API_URL=") || strings.HasPrefix(e, "SHOAL_TOKEN=") {
			t.Fatalf("a replica without the self API has %s", e)
		}
	}
}

// A replicate of a revision whose record cannot be read is an error, not
// a crash.
func TestSelfReplicateUnreadableRevision(t *testing.T) {
	h := newSelfHarness(t)
	h.deploy("min = 1\nmax = 4", env("1"))
	h.wait("revision 1 ready", func() bool { return len(h.byRevision(1, StateReady)) == 1 })
	h.deploy("min = 1\nmax = 4", env("2"))
	h.wait("the rollout is done", func() bool { return h.app().Rollout.State == types.RolloutDone })
	if _, err := h.m.SetTraffic(context.Background(), "hello", types.TrafficRequest{
		Traffic: []types.TrafficTarget{{Revision: 1, Percent: 50}, {Revision: 2, Percent: 50}}}); err != nil {
		t.Fatal(err)
	}
	h.wait("one ready of each", func() bool {
		return len(h.byRevision(1, StateReady)) == 1 && len(h.byRevision(2, StateReady)) == 1
	})
	c := h.caller(h.byRevision(1, StateReady)[0])
	if err := h.m.o.Store.Delete(context.Background(), store.RevisionKey("hello", 1)); err != nil {
		t.Fatal(err)
	}
	ctl := h.m.app("hello")
	ctl.mu.Lock()
	delete(ctl.revs, 1)
	ctl.mu.Unlock()
	_, err := h.m.SelfAPI().Replicate(context.Background(), c, true)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "revision 1") {
		t.Fatalf("replicate of an unreadable revision: %v", err)
	}
}

// A replicate that waits for a replica slower than the self API may wait
// answers in time, with the replica still starting.
func TestSelfReplicateWaitBounded(t *testing.T) {
	h := newSelfHarness(t)
	h.deploy("min = 1\nmax = 2", "[health]\nhttp = \"/fail\"\nstart_timeout = \"10m\"")
	h.wait("one replica", func() bool { return len(h.replicas()[StateStarting]) == 1 })
	c := h.caller(h.replicas()[StateStarting][0])
	type answer struct {
		res appapi.Result
		err error
	}
	done := make(chan answer, 1)
	began := h.clock.Now()
	go func() {
		res, err := h.m.SelfAPI().Replicate(context.Background(), c, true)
		done <- answer{res, err}
	}()
	var got answer
	h.advanceUntil("the replicate answers", 5*time.Second, func() bool {
		select {
		case got = <-done:
			return true
		default:
			return false
		}
	})
	if got.err != nil || got.res.How != "started" || State(got.res.Replica.State) == StateReady {
		t.Fatalf("replicate: %+v %v", got.res, got.err)
	}
	if waited := h.clock.Since(began); waited > appapi.MaxReplicateWait+5*time.Second {
		t.Fatalf("replicate waited %s of the fake clock, more than %s", waited, appapi.MaxReplicateWait)
	}
}
