package serving

import "testing"

// The route carries the app's [scale] max_connections to the proxy, which
// bounds the connections to each of its replicas on its node by it.
func TestRouteMaxConnections(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\nmax = 1\nmax_connections = 200")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	if got := h.r.route("hello").MaxConns; got != 200 {
		t.Fatalf("route's MaxConns %d, want 200", got)
	}
}
