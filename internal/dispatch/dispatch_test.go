package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
)

// live is a live node of 4 CPUs and 4 GiB.
func live(name string) cluster.Node {
	return cluster.Node{Record: cluster.Record{Name: name, CPUs: 4, Memory: 4 << 30}, State: cluster.StateReady}
}

// newTest returns a Dispatcher on node n1 whose other nodes are all rn.
func newTest(rn node.Node, c clock.Clock) *Dispatcher {
	return New(Options{Self: "n1", Dir: "/apps", Remote: func(string) node.Node { return rn }, Clock: c,
		Logger: slog.New(slog.DiscardHandler)})
}

// waitNode is a remote node whose Wait is cut off (a transport error)
// while cut is above 0, and otherwise blocks until released or its
// context ends.
type waitNode struct {
	node.Node
	cut     atomic.Int32
	calls   atomic.Int32
	release chan struct{}
}

func (n *waitNode) Wait(ctx context.Context, id string) (node.ExitStatus, error) {
	n.calls.Add(1)
	if n.cut.Add(-1) >= 0 {
		return node.ExitStatus{}, errors.New("connection reset by peer")
	}
	select {
	case <-n.release:
		return node.ExitStatus{Code: 3, Known: true}, nil
	case <-ctx.Done():
		return node.ExitStatus{}, ctx.Err()
	}
}

func (n *waitNode) Adopt(context.Context, node.Known) (node.Adopted, error) {
	n.calls.Add(1)
	return node.Adopted{Running: true}, nil
}

func (n *waitNode) Remove(context.Context, string) error {
	n.calls.Add(1)
	return nil
}

func (n *waitNode) Check(context.Context, string, string, manifest.Health) error {
	n.calls.Add(1)
	return nil
}

// TestDispatcherWait: a remote wait cut off while its node is live is made
// again; one in flight when the node leaves the live set ends at once, and
// no later call reaches the node.
func TestDispatcherWait(t *testing.T) {
	fc := clock.NewFake(time.Unix(1e9, 0))
	rn := &waitNode{release: make(chan struct{})}
	d := newTest(rn, fc)
	d.SetLive([]cluster.Node{live("n1"), live("n2")})
	d.Adopt(context.Background(), node.Known{ID: "r1", App: "a", Node: "n2"})
	type res struct {
		st  node.ExitStatus
		err error
	}
	wait := func() chan res {
		ch := make(chan res, 1)
		go func() { st, err := d.Wait(context.Background(), "r1"); ch <- res{st, err} }()
		return ch
	}

	rn.calls.Store(0)
	rn.cut.Store(2)
	ch := wait()
	for i := 0; rn.calls.Load() < 3; i++ {
		if i > 5000 {
			t.Fatalf("%d waits made; want the two cut off made again", rn.calls.Load())
		}
		fc.Advance(waitAgain)
		time.Sleep(time.Millisecond)
	}
	close(rn.release)
	if r := <-ch; r.err != nil || r.st.Code != 3 {
		t.Fatalf("wait: %+v; want the node's exit status", r)
	}

	rn.release = make(chan struct{})
	ch = wait()
	for rn.calls.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	d.SetLive([]cluster.Node{live("n1")})
	select {
	case r := <-ch:
		if !errors.Is(r.err, errdefs.ErrUnavailable) || !strings.Contains(r.err.Error(), "node n2 is not live") {
			t.Fatalf("a wait on a lost node: %v; want node n2 not live", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a wait in flight to a lost node did not end")
	}
	calls := rn.calls.Load()
	d.Adopt(context.Background(), node.Known{ID: "r2", App: "a", Node: "n2"})
	if _, err := d.Wait(context.Background(), "r2"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("wait on a lost node: %v; want unavailable", err)
	}
	if err := d.Check(context.Background(), "r2", "", manifest.Health{}); err == nil {
		t.Fatal("a check on a lost node passed")
	}
	if err := d.Remove(context.Background(), "r2"); err != nil {
		t.Fatalf("remove on a lost node: %v; want nothing done, no error", err)
	}
	if got := rn.calls.Load(); got != calls {
		t.Fatalf("%d calls reached the lost node", got-calls)
	}
}

// stuckNode is a remote node whose short calls hang until released or
// until their context ends (then failing with its error, as the agent's
// client does), as a call to a node whose link went down does.
type stuckNode struct {
	node.Node
	calls   atomic.Int32
	release chan struct{}
}

func (n *stuckNode) hang(ctx context.Context) error {
	n.calls.Add(1)
	select {
	case <-n.release:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("node n2: %w", ctx.Err())
	}
}

func (n *stuckNode) Freeze(ctx context.Context, _ string) (int64, error) { return 0, n.hang(ctx) }
func (n *stuckNode) Thaw(ctx context.Context, _ string) error            { return n.hang(ctx) }
func (n *stuckNode) Usage(ctx context.Context, _ string) (node.CPUUse, error) {
	return node.CPUUse{Periods: 1}, n.hang(ctx)
}
func (n *stuckNode) SetCPU(ctx context.Context, _ string, _ float64) error { return n.hang(ctx) }
func (n *stuckNode) Release(ctx context.Context, _ string) error           { return n.hang(ctx) }
func (n *stuckNode) Adopt(context.Context, node.Known) (node.Adopted, error) {
	return node.Adopted{Running: true}, nil
}

// TestDispatcherCallsEndWithTheirNode: the short calls (freeze, thaw,
// usage, CPU, release) hanging on a node end as soon as the node leaves the
// live set, so that the controller, which waits on them, replaces the
// node's replicas without waiting for a time-out.
func TestDispatcherCallsEndWithTheirNode(t *testing.T) {
	fc := clock.NewFake(time.Unix(1e9, 0))
	rn := &stuckNode{release: make(chan struct{})}
	defer close(rn.release)
	d := newTest(rn, fc)
	d.SetLive([]cluster.Node{live("n1"), live("n2")})
	d.Adopt(context.Background(), node.Known{ID: "r1", App: "a", Node: "n2"})
	ctx := context.Background()
	calls := map[string]func() error{
		"freeze":  func() error { _, err := d.Freeze(ctx, "r1"); return err },
		"thaw":    func() error { return d.Thaw(ctx, "r1") },
		"usage":   func() error { _, err := d.Usage(ctx, "r1"); return err },
		"cpu":     func() error { return d.SetCPU(ctx, "r1", 1) },
		"release": func() error { return d.Release(ctx, "r1") },
	}
	type result struct {
		name string
		err  error
	}
	done := make(chan result, len(calls))
	for name, call := range calls {
		go func() { done <- result{name, call()} }()
	}
	for rn.calls.Load() < int32(len(calls)) {
		time.Sleep(time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("%s on a live node that hangs ended: %v", r.name, r.err)
	default:
	}
	d.SetLive([]cluster.Node{live("n1")})
	for range calls {
		select {
		case r := <-done:
			if !errors.Is(r.err, errdefs.ErrUnavailable) || !strings.Contains(r.err.Error(), "node n2 is not live") {
				t.Fatalf("%s hanging on a lost node: %v; want node n2 not live", r.name, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a call hanging on a node that left the live set did not end")
		}
	}
}

// checkNode is a remote node whose Check hangs until its context ends and
// then fails as the agent's client does: with the context's error.
type checkNode struct {
	node.Node
	calls atomic.Int32
}

func (n *checkNode) Check(ctx context.Context, id, _ string, _ manifest.Health) error {
	n.calls.Add(1)
	<-ctx.Done()
	return fmt.Errorf("node n2: %w", ctx.Err())
}

func (n *checkNode) Adopt(context.Context, node.Known) (node.Adopted, error) {
	return node.Adopted{Running: true}, nil
}

// TestDispatcherCheckOnLostNode: a health check in flight when its node
// leaves the live set is the node's loss (unavailable, naming the node), so
// that the health loop takes the replica for lost, not for failed; a check
// its caller gives up stays the caller's.
func TestDispatcherCheckOnLostNode(t *testing.T) {
	fc := clock.NewFake(time.Unix(1e9, 0))
	rn := &checkNode{}
	d := newTest(rn, fc)
	d.SetLive([]cluster.Node{live("n1"), live("n2")})
	d.Adopt(context.Background(), node.Known{ID: "r1", App: "a", Node: "n2"})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Check(ctx, "r1", "", manifest.Health{}); !errors.Is(err, context.Canceled) || errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("a check its caller gave up: %v; want canceled, not unavailable", err)
	}

	errc := make(chan error, 1)
	go func() { errc <- d.Check(context.Background(), "r1", "", manifest.Health{}) }()
	for i := 0; rn.calls.Load() < 2; i++ {
		if i > 10000 {
			t.Fatal("the check did not reach n2")
		}
		time.Sleep(time.Millisecond)
	}
	d.SetLive([]cluster.Node{live("n1")})
	select {
	case err := <-errc:
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "node n2 is not live") {
			t.Fatalf("a check on a node that left the live set: %v; want node n2 not live", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a check in flight to a lost node did not end")
	}
}

// removeNode is a remote node whose first fails Removes fail.
type removeNode struct {
	node.Node
	fails atomic.Int32
	calls atomic.Int32
}

func (n *removeNode) Remove(context.Context, string) error {
	n.calls.Add(1)
	if n.fails.Add(-1) >= 0 {
		return errors.New("node n2: delete container: device or resource busy")
	}
	return nil
}

func (n *removeNode) Adopt(context.Context, node.Known) (node.Adopted, error) {
	return node.Adopted{Running: true}, nil
}

// TestDispatcherRemoveAgain: a removal on another node that failed keeps
// the replica placed there, so the removal made again reaches that node
// (it went to this host, which has no such container, and succeeded).
func TestDispatcherRemoveAgain(t *testing.T) {
	rn, local := &removeNode{}, &removeNode{}
	rn.fails.Store(1)
	d := New(Options{Self: "n1", Dir: "/apps", Local: local, Remote: func(string) node.Node { return rn },
		Clock: clock.NewFake(time.Unix(1e9, 0)), Logger: slog.New(slog.DiscardHandler)})
	d.SetLive([]cluster.Node{live("n1"), live("n2")})
	d.Adopt(context.Background(), node.Known{ID: "r1", App: "", Node: "n2"})
	if err := d.Remove(context.Background(), "r1"); err == nil {
		t.Fatal("the failed removal succeeded")
	}
	if err := d.Remove(context.Background(), "r1"); err != nil {
		t.Fatal(err)
	}
	if n, l := rn.calls.Load(), local.calls.Load(); n != 2 || l != 0 {
		t.Fatalf("node n2 was asked to remove the replica %d times and this host %d times, want 2 and 0", n, l)
	}
	if w := d.Where("r1"); w != "" && w != "n1" {
		t.Fatalf("a removed replica is still placed on %s", w)
	}
}
