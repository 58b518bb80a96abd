package daemon

import (
	"errors"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
)

var errTest = errors.New("store cut off")

// The lease guard tells the queue once no renewal has succeeded for half
// the TTL, or the heartbeat counts itself lost, and not before.
func TestLeaseGuard(t *testing.T) {
	now := time.Unix(1000, 0)
	calls := 0
	g := leaseGuard(3*time.Second, func() time.Time { return now }, func() { calls++ })
	fail := cluster.Status{Err: errTest}
	g(fail) // no renewal yet: nothing to measure from
	g(cluster.Status{Alive: true})
	now = now.Add(time.Second)
	g(fail)
	if calls != 0 {
		t.Fatalf("told after 1s of a 3s lease without renewal")
	}
	now = now.Add(500 * time.Millisecond)
	g(fail)
	if calls != 1 {
		t.Fatalf("told %d times after half the lease without renewal, want 1", calls)
	}
	g(cluster.Status{Alive: true})
	g(cluster.Status{Lost: true, Err: errTest})
	if calls != 2 {
		t.Fatalf("told %d times once the heartbeat counts itself lost, want 2", calls)
	}
}
