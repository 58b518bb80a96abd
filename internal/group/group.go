// Package group counts goroutines as a sync.WaitGroup does, but allows
// work to be added from zero while Wait waits: a service's end waits for
// work started by goroutines it does not count (an API handler still
// running after its server closed, a drain ending on a replica's exit),
// which a sync.WaitGroup forbids ("reused before previous Wait has
// returned", "Add called concurrently with Wait").
package group

import "sync"

// Group counts goroutines. Work added after Wait returned is not waited
// for: whoever waits has stopped what starts work by then, or accepts
// that it runs on. The zero Group is ready to use.
type Group struct {
	mu   sync.Mutex
	n    int
	zero *sync.Cond
}

// Add adds delta, which may be negative, to the count.
func (g *Group) Add(delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n += delta
	switch {
	case g.n < 0:
		panic("group: negative count")
	case g.n == 0 && g.zero != nil:
		g.zero.Broadcast()
	}
}

// Done takes one from the count.
func (g *Group) Done() { g.Add(-1) }

// Wait returns once the count is zero.
func (g *Group) Wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.zero == nil {
		g.zero = sync.NewCond(&g.mu)
	}
	for g.n > 0 {
		g.zero.Wait()
	}
}
