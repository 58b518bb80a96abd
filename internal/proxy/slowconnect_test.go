package proxy

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// slowErr is a connect that got no answer in time.
type slowErr struct{}

func (slowErr) Error() string   { return "i/o timeout" }
func (slowErr) Timeout() bool   { return true }
func (slowErr) Temporary() bool { return true }

// slowDials is an Options.Dial whose first n connects time out, then
// connect for real; it counts the connects. It is the proxy's own (no
// package variable swapped), so other tests' pools never see it.
func slowDials(n int32) (dialFunc, *atomic.Int32) {
	var calls atomic.Int32
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if calls.Add(1) <= n {
			return nil, &net.OpError{Op: "dial", Net: network, Err: slowErr{}}
		}
		return dialer.DialContext(ctx, network, addr)
	}, &calls
}

// A replica that does not accept within DialTimeout (just thawed on a busy
// host) is the only one: the request connects to it again rather than
// getting 502.
func TestSlowConnectRetried(t *testing.T) {
	dial, calls := slowDials(maxSlowRetries)
	f := newFront(t, Options{Clock: clock.NewFake(time.Unix(0, 0)), Dial: dial})
	f.p.SetRoute(routeTo("a", namedBackend(t, "thawed")))
	code, body, _ := f.get(t, "a.localhost", "/")
	if code != 200 || body != "thawed" {
		t.Fatalf("request to a replica slow to accept: %d %q, want 200 thawed", code, body)
	}
	if n := calls.Load(); n != maxSlowRetries+1 {
		t.Fatalf("%d connects, want %d", n, maxSlowRetries+1)
	}
	if n := counterValue(f.p.metrics.retries.WithLabelValues("a")); n != maxSlowRetries {
		t.Fatalf("retries = %v, want %d", n, maxSlowRetries)
	}
}

// Connects that keep timing out end in 502 after maxSlowRetries more.
func TestSlowConnectGivesUp(t *testing.T) {
	dial, calls := slowDials(1000)
	f := newFront(t, Options{Clock: clock.NewFake(time.Unix(0, 0)), Dial: dial})
	f.p.SetRoute(routeTo("a", namedBackend(t, "never")))
	if code, body, _ := f.get(t, "a.localhost", "/"); code != 502 {
		t.Fatalf("request to a replica that never accepts: %d %q, want 502", code, body)
	}
	if n := calls.Load(); n != maxSlowRetries+1 {
		t.Fatalf("%d connects, want %d", n, maxSlowRetries+1)
	}
}
