package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/serving"
	"github.com/shoal-run/shoal/internal/store"
)

// leadership is what servingCluster needs of the elector.
type leadership interface {
	Leading() cluster.Term
	Changed() <-chan struct{}
}

// servingCluster is the cluster as the serving Manager sees it: this
// node's leadership, the live nodes with their records, and a change of
// either (leadership, the live set, or a node record: a drain mark). It
// is made before serving starts and follows the elector once the node has
// joined (run); until then the node follows.
type servingCluster struct {
	st store.Store
	ch chan struct{}

	mu sync.Mutex
	el leadership // nil until run
}

func newServingCluster(st store.Store) *servingCluster {
	return &servingCluster{st: st, ch: make(chan struct{}, 1)}
}

// Term returns this node's leadership, or nil while it follows.
func (c *servingCluster) Term() cluster.Term {
	c.mu.Lock()
	el := c.el
	c.mu.Unlock()
	if el == nil {
		return nil
	}
	return el.Leading()
}

// Nodes returns the ready and draining nodes with their capacity.
func (c *servingCluster) Nodes(ctx context.Context) ([]serving.NodeInfo, error) {
	nodes, err := cluster.List(ctx, c.st)
	if err != nil {
		return nil, err
	}
	var out []serving.NodeInfo
	for _, n := range nodes {
		if n.State == cluster.StateDown {
			continue
		}
		out = append(out, serving.NodeInfo{Name: n.Name, CPUs: n.CPUs, Memory: n.Memory, FrozenMemory: n.FrozenMemory,
			Draining: n.State == cluster.StateDraining})
	}
	return out, nil
}

// Changed gets a value after a change of leadership, of the live set or
// of a node record.
func (c *servingCluster) Changed() <-chan struct{} { return c.ch }

// tell has Changed told.
func (c *servingCluster) tell() {
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

// run follows el and live, and tells Changed of their changes and of the
// node records', until ctx ends.
func (c *servingCluster) run(ctx context.Context, el leadership, live *cluster.Live) {
	led, lived := el.Changed(), live.Changed()
	c.mu.Lock()
	c.el = el
	c.mu.Unlock()
	c.tell()
	go func() {
		for ctx.Err() == nil {
			w, err := c.st.Watch(ctx, store.NodesPrefix)
			if err == nil {
				for range w {
					c.tell()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-led:
		case <-lived:
		}
		c.tell()
	}
}

// backAgain returns a heartbeat observer that calls back, in a goroutine
// of its own, with the time of the first good step after a step that
// found the node's key dropped (the node was down for the others).
func backAgain(back func(at time.Time)) func(cluster.Status) {
	lost := false
	return func(s cluster.Status) {
		switch {
		case s.Lost:
			lost = true
		case s.Alive && lost:
			lost = false
			go back(time.Now())
		}
	}
}
