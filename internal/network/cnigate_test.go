package network

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// CNI operations wait for a turn, at most cniAtOnce at once, and a
// background operation's limit counts from its turn: one that waited
// behind a burst is not killed for the time it waited.
func TestCNIGate(t *testing.T) {
	g := newCNIGate()
	var in, most atomic.Int32
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 3 * cniAtOnce {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, leave, err := g.enter(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			n := in.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release
			in.Add(-1)
			leave()
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); in.Load() < cniAtOnce; {
		if time.Now().After(deadline) {
			t.Fatalf("%d operations got a turn, want %d", in.Load(), cniAtOnce)
		}
		time.Sleep(time.Millisecond)
	}

	// A bounded operation waiting behind the others has no deadline yet;
	// it gets one when its turn comes.
	got := make(chan context.Context, 1)
	go func() {
		ctx, leave, err := g.enter(withOpLimit(context.Background(), time.Hour))
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		defer leave()
		got <- ctx
	}()
	released := time.Now()
	close(release)
	wg.Wait()
	ctx := <-got
	if ctx == nil {
		t.FailNow()
	}
	if d, ok := ctx.Deadline(); !ok || d.Before(released.Add(time.Hour)) {
		t.Fatalf("deadline %v (set %v), want one an hour after the turn came, after %v", d, ok, released)
	}
	if m := most.Load(); m > cniAtOnce {
		t.Fatalf("%d operations at once, want at most %d", m, cniAtOnce)
	}

	// A caller that goes away while it waits gets its context's error.
	for range cniAtOnce {
		g <- struct{}{}
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := g.enter(cctx); err == nil {
		t.Fatal("a canceled wait for a turn got one")
	}
}
