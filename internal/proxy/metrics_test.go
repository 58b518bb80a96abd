package proxy

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// histogram returns the count and sum of a histogram's one series.
func histogram(t *testing.T, o prometheus.Observer) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// Time to first byte is recorded by tier: a request held while the app
// has a frozen replica is "frozen", one held while it has none "cold", one
// that found a ready replica "warm". The proxy's added latency leaves out
// the time held.
func TestFirstByteByTier(t *testing.T) {
	fake := clock.NewFake(time.Unix(1000, 0))
	f := newFront(t, Options{Activator: newActivator(), Clock: fake})
	backend := namedBackend(t, "a")
	for _, c := range []struct {
		tier   string
		frozen int
		held   time.Duration
	}{{"frozen", 1, 2 * time.Second}, {"cold", 0, 5 * time.Second}} {
		f.p.SetRoute(route.Route{App: "a", Frozen: c.frozen})
		done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
		eventually(t, "the request to queue", func() bool { return f.p.Load("a").Queued == 1 })
		fake.Advance(c.held)
		f.p.SetRoute(routeTo("a", backend))
		if r := recv(t, done, "the held request"); r.code != 200 {
			t.Fatalf("%s: held request: %+v", c.tier, r)
		}
		n, sum := histogram(t, f.p.metrics.firstByte.WithLabelValues("a", c.tier))
		if n != 1 || sum != c.held.Seconds() {
			t.Fatalf("first_byte_seconds{tier=%s}: %d observations summing %vs, want one of %v", c.tier, n, sum, c.held)
		}
	}
	if code, _, _ := f.get(t, "a.localhost", "/"); code != 200 {
		t.Fatalf("warm request: %d", code)
	}
	if n, sum := histogram(t, f.p.metrics.firstByte.WithLabelValues("a", "warm")); n != 1 || sum != 0 {
		t.Fatalf("first_byte_seconds{tier=warm}: %d observations summing %vs, want one of 0s", n, sum)
	}
	// The clock stood still while the proxy worked: nothing is added but
	// the time held, which is left out.
	if n, sum := histogram(t, f.p.metrics.added.WithLabelValues("a")); n != 3 || sum != 0 {
		t.Fatalf("added_latency_seconds: %d observations summing %vs, want three of 0s", n, sum)
	}
}
