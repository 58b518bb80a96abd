package daemon

import (
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
)

// TestBackAgain: the node is told it is back once, at the first good
// heartbeat after its key was dropped.
func TestBackAgain(t *testing.T) {
	backs := make(chan time.Time, 10)
	obs := backAgain(func(at time.Time) { backs <- at })
	for _, s := range []cluster.Status{{Alive: true}, {}, {Lost: true}, {}, {Alive: true}, {Alive: true}} {
		obs(s)
	}
	select {
	case <-backs:
	case <-time.After(10 * time.Second):
		t.Fatal("not told the node is back")
	}
	select {
	case <-backs:
		t.Fatal("told twice")
	case <-time.After(50 * time.Millisecond):
	}
}
