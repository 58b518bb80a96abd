package routes

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

type wakes struct {
	mu   sync.Mutex
	apps []string
}

func (w *wakes) Activate(app string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.apps = append(w.apps, app)
}

// leaderWakes blocks each wake-up until the test lets it go.
type leaderWakes struct {
	calls   atomic.Int32
	release chan struct{}
}

func (l *leaderWakes) ActivateOnLeader(ctx context.Context, app string) error {
	l.calls.Add(1)
	select {
	case <-l.release:
	case <-ctx.Done():
	}
	return nil
}

// TestActivatorGoesToTheLeader: a leader wakes its own apps; a follower
// asks the leader, once at a time per app however often its proxy asks.
func TestActivatorGoesToTheLeader(t *testing.T) {
	var leading atomic.Bool
	local := &wakes{}
	leader := &leaderWakes{release: make(chan struct{})}
	a := &Activator{Local: local, Leader: leader, Leading: leading.Load}
	for range 10 {
		a.Activate("web")
	}
	a.Activate("api")
	until(t, "the wake-ups to reach the leader", func() bool { return leader.calls.Load() == 2 })
	time.Sleep(20 * time.Millisecond)
	if n := leader.calls.Load(); n != 2 {
		t.Fatalf("%d wake-ups sent to the leader; want one per app while one is under way", n)
	}
	close(leader.release)
	until(t, "the wake-ups to end", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.sending) == 0
	})
	a.Activate("web")
	until(t, "a later wake-up to be sent", func() bool { return leader.calls.Load() == 3 })
	leading.Store(true)
	a.Activate("web")
	local.mu.Lock()
	defer local.mu.Unlock()
	if len(local.apps) != 1 || local.apps[0] != "web" || leader.calls.Load() != 3 {
		t.Fatalf("while leading: woken here %v, %d sent to a leader", local.apps, leader.calls.Load())
	}
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// leaderAway fails the first wake-ups sent to it (no leader during an
// election), then takes them.
type leaderAway struct {
	calls atomic.Int32
	fails int32
}

func (l *leaderAway) ActivateOnLeader(ctx context.Context, app string) error {
	if l.calls.Add(1) <= l.fails {
		return errors.New("the cluster has no leader")
	}
	return nil
}

// A wake-up the leader did not take is sent again (the proxy, answered
// 202, does not ask again), until it is taken; and for no longer than
// activateKeep.
func TestActivatorRetriesUntilTheLeaderTakesIt(t *testing.T) {
	fc := clock.NewFake(time.Unix(1e9, 0))
	leader := &leaderAway{fails: 3}
	a := &Activator{Local: &wakes{}, Leader: leader, Leading: func() bool { return false }, Clock: fc}
	a.Activate("web")
	until(t, "the wake-up to be taken after the leader failed it thrice", func() bool {
		fc.Advance(activateRetryMax)
		return leader.calls.Load() == 4
	})
	until(t, "the wake-up to end once taken", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.sending) == 0
	})

	away := &leaderAway{fails: 1 << 30}
	a = &Activator{Local: &wakes{}, Leader: away, Leading: func() bool { return false }, Clock: fc}
	a.Activate("web")
	until(t, "the wake-up to be given up after activateKeep", func() bool {
		fc.Advance(activateRetryMax)
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.sending) == 0
	})
	if n := away.calls.Load(); n < 2 || n > int32(activateKeep/activateRetryMax)+10 {
		t.Fatalf("%d wake-ups sent before giving up; want a retry every %s or less for %s", n, activateRetryMax, activateKeep)
	}
}
