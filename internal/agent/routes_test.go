package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/route"
)

// routing records the calls it gets; WaitApplied waits until idle is
// closed.
type routing struct {
	mu      sync.Mutex
	woken   []string
	reports map[string]map[string]route.Load
	waits   []string
	idle    chan struct{}
}

func (r *routing) Activate(app string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.woken = append(r.woken, app)
}

func (r *routing) Report(node string, loads map[string]route.Load) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports[node] = loads
}

func (r *routing) WaitApplied(ctx context.Context, id string, seq int64) error {
	r.mu.Lock()
	r.waits = append(r.waits, id)
	r.mu.Unlock()
	if seq < 0 {
		return errors.New("no such route")
	}
	select {
	case <-r.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The routing calls reach the node's Routing over real HTTP with the
// cluster secret: a wake-up, a load report, and a wait that returns once
// the node is idle or when the caller gives up.
func TestRoutingCalls(t *testing.T) {
	st := testStore(t)
	rt := &routing{reports: map[string]map[string]route.Load{}, idle: make(chan struct{})}
	srv := serve(t, (&Server{Name: "n1", Secret: testSecret, Routing: rt}).Handler())
	addNode(t, st, "n1", srv)
	c := NewClient(st, testSecret)
	ctx := context.Background()
	if err := c.Activate(ctx, "n1", "web"); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 24, 23, 0, 0, 0, time.UTC)
	loads := map[string]route.Load{"web": {InFlight: 3, Requests: 9, LastRequest: at,
		Endpoints: map[string]route.EndpointLoad{"web-1": {InFlight: 3, Requests: 9, LastRequest: at}}}}
	if err := c.ReportLoad(ctx, "n1", "n2", loads); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := c.WaitIdle(short, "n1", "web-1", 7); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a busy endpoint: %v; want the caller's deadline", err)
	}
	close(rt.idle)
	if err := c.WaitIdle(ctx, "n1", "web-1", 7); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitIdle(ctx, "n1", "web-1", -1); err == nil {
		t.Fatal("a failed wait came back as none")
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	got := rt.reports["n2"]["web"]
	if len(rt.woken) != 1 || rt.woken[0] != "web" || got.InFlight != 3 || !got.LastRequest.Equal(at) || got.Endpoints["web-1"].Requests != 9 {
		t.Fatalf("woken %v, reports %+v", rt.woken, rt.reports)
	}
	// A node without routing says so.
	srv2 := serve(t, (&Server{Name: "n2", Secret: testSecret}).Handler())
	addNode(t, st, "n2", srv2)
	if err := c.Activate(ctx, "n2", "web"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("a node without routing: %v; want unavailable", err)
	}
}
