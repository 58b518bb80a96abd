package serving

import (
	"context"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// The start budget grows by one a window while starts take about as long
// as the fastest, shrinks by 30 % (once a start's time) when they take
// gateSlow times as long, and stays within its bounds.
func TestAdmissionLimitFollowsStartTime(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := newAdmission(clk)
	start := func(took time.Duration) {
		t.Helper()
		began, ok := g.acquire(context.Background(), nil, false, clk.Now())
		if !ok {
			t.Fatal("not admitted")
		}
		clk.Advance(took)
		g.release(began, true)
	}
	limit := func() float64 { l, _, _ := g.state(); return l }
	for range 100 {
		start(80 * time.Millisecond)
	}
	grown := limit()
	if grown < gateInit+5 {
		t.Fatalf("after 100 fast starts the limit is %.1f, want it grown from %d", grown, gateInit)
	}
	// Contention: two starts under way take 12 and 6 times the fastest;
	// the second, under way at the first's decrease, cuts no further.
	a, _ := g.acquire(context.Background(), nil, false, clk.Now())
	b, _ := g.acquire(context.Background(), nil, false, clk.Now())
	clk.Advance(time.Second)
	g.release(a, true)
	if l := limit(); l > grown*0.71 || l < grown*0.69 {
		t.Fatalf("after a slow start the limit is %.1f, want 70 %% of %.1f", l, grown)
	}
	cut := limit()
	clk.Advance(500 * time.Millisecond)
	g.release(b, true)
	if l := limit(); l != cut {
		t.Fatalf("a slow start under way at the decrease cut the limit again: %.1f, want %.1f", l, cut)
	}
	for range 50 {
		start(5 * time.Second)
	}
	if l := limit(); l != gateMin {
		t.Fatalf("after slow starts the limit is %.1f, want the floor %d", l, gateMin)
	}
	// A failed start measures nothing.
	began, _ := g.acquire(context.Background(), nil, false, clk.Now())
	clk.Advance(time.Minute)
	g.release(began, false)
	if l := limit(); l != gateMin {
		t.Fatalf("a failed start moved the limit to %.1f", l)
	}
	for range 5000 {
		start(80 * time.Millisecond)
	}
	if l := limit(); l != gateMax {
		t.Fatalf("the limit is %.1f, want at most %d", l, gateMax)
	}
}

// Past the limit starts wait: those for an app with a request waiting go
// first, the oldest waiting first, then the others in the order they
// came; a waiter whose context ends leaves the queue.
func TestAdmissionOrder(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := newAdmission(clk)
	g.limit = 1
	held, _ := g.acquire(context.Background(), nil, false, clk.Now())
	t0 := clk.Now()
	type in struct {
		name   string
		urgent bool
		at     time.Time
	}
	order := make(chan string, 8)
	wait := func(n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if _, _, w := g.state(); w == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiting, want %d", func() int { _, _, w := g.state(); return w }(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	gone, cancel := context.WithCancel(context.Background())
	ins := []in{
		{"scale-out", false, t0.Add(time.Second)},
		{"waits 2s", true, t0.Add(-2 * time.Second)},
		{"cancelled", true, t0.Add(-10 * time.Second)},
		{"waits 5s", true, t0.Add(-5 * time.Second)},
		{"min", false, t0.Add(2 * time.Second)},
	}
	for i, x := range ins {
		ctx := context.Background()
		if x.name == "cancelled" {
			ctx = gone
		}
		go func() {
			began, ok := g.acquire(ctx, nil, x.urgent, x.at)
			if !ok {
				order <- x.name + " (left)"
				return
			}
			order <- x.name
			g.release(began, false)
		}()
		wait(i + 1)
	}
	cancel()
	if got := <-order; got != "cancelled (left)" {
		t.Fatalf("first out: %q, want the cancelled waiter leaving", got)
	}
	g.release(held, false)
	for _, want := range []string{"waits 5s", "waits 2s", "scale-out", "min"} {
		if got := <-order; got != want {
			t.Fatalf("admitted %q, want %q", got, want)
		}
	}
	if _, running, waiting := g.state(); running != 0 || waiting != 0 {
		t.Fatalf("after all: %d running, %d waiting", running, waiting)
	}
}
