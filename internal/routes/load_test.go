package routes

import (
	"context"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// stuckSink holds its first report until the call's context ends, as a
// leader cut off without a word does, and takes the next ones at once.
type stuckSink struct {
	mu        sync.Mutex
	calls     int
	cancelled bool
}

func (s *stuckSink) ReportLoad(ctx context.Context, node string, loads map[string]route.Load) error {
	s.mu.Lock()
	s.calls++
	first := s.calls == 1
	s.mu.Unlock()
	if !first {
		return nil
	}
	<-ctx.Done()
	s.mu.Lock()
	s.cancelled = true
	s.mu.Unlock()
	return ctx.Err()
}

func (s *stuckSink) state() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.cancelled
}

// TestReportGivesUpOnSilentLeader: a report the leader never answers is
// given up after reportTimeout, and the follower goes on reporting (to
// whichever node leads by then).
func TestReportGivesUpOnSilentLeader(t *testing.T) {
	g := newRig(t)
	n2 := g.node("n2", false)
	get := func() map[string]route.Load { return map[string]route.Load{"web": {InFlight: 1, Requests: 4}} }
	s := &stuckSink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n2.r.ReportLoads(ctx, get, s) }()
	defer func() { cancel(); <-done }()
	// The node's timers: its prune tick and the report's.
	g.until("the report timer", func() bool { return g.clk.Timers() >= 2 })
	g.clk.Advance(ReportEvery)
	g.until("the first report", func() bool { n, _ := s.state(); return n == 1 })
	// The report's own deadline is armed beside the prune tick.
	g.until("the report's deadline", func() bool { return g.clk.Timers() >= 2 })
	g.clk.Advance(reportTimeout)
	g.until("the first report given up", func() bool { _, c := s.state(); return c })
	g.until("the next report timer", func() bool { return g.clk.Timers() >= 2 })
	g.clk.Advance(ReportEvery)
	g.until("the next report", func() bool { n, _ := s.state(); return n == 2 })
}
