package agent

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// LiveSet is the cluster's live nodes as the Client follows them (a
// *cluster.Live): a call to a node ends when the node leaves the set,
// rather than when TCP gives up on a peer that went silent.
type LiveSet interface {
	// Nodes returns the names of the live nodes.
	Nodes() []string
	// Ready is closed once the set is known; until then every node
	// counts as live.
	Ready() <-chan struct{}
	// Changed gets a value after every change of the set.
	Changed() <-chan struct{}
}

// liveWatch tells the calls under way of every change of the live set:
// the channel next returns is closed at the next change.
type liveWatch struct {
	once sync.Once
	mu   sync.Mutex
	gen  chan struct{}
}

// next returns a channel closed at the next change of set.
func (w *liveWatch) next(set LiveSet) <-chan struct{} {
	w.once.Do(func() {
		w.gen = make(chan struct{})
		changed := set.Changed()
		go func() {
			for range changed {
				w.mu.Lock()
				close(w.gen)
				w.gen = make(chan struct{})
				w.mu.Unlock()
			}
		}()
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// whileLive returns ctx, ended early (its cause errdefs.ErrUnavailable)
// once node leaves the live set, and the function that releases it.
// Without a LiveSet it is ctx. Only a node seen live during the call can
// leave: one not in this node's set yet (it joins, its heartbeat not seen
// here yet) is not cut, and one down from the start fails to connect
// within the dialer's timeout.
func (c *Client) whileLive(ctx context.Context, node string) (context.Context, func()) {
	if c.Live == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	// Whether the node is live is seen before the call begins, not when
	// the goroutine first runs: on a busy host the call may reach the node,
	// and the node leave, before then.
	next := c.watch.next(c.Live)
	seen := c.isLive(node)
	go func() {
		for {
			select {
			case <-next:
			case <-ctx.Done():
				return
			}
			next = c.watch.next(c.Live)
			live := c.isLive(node)
			if seen && !live {
				cancel(fmt.Errorf("node %s left the cluster's live nodes: %w", node, errdefs.ErrUnavailable))
				return
			}
			seen = seen || live
		}
	}()
	return ctx, func() { cancel(nil) }
}

// isLive reports whether node is in the live set; while the set is not
// known, no node is.
func (c *Client) isLive(node string) bool {
	select {
	case <-c.Live.Ready():
		return slices.Contains(c.Live.Nodes(), node)
	default:
		return false
	}
}

// releaseBody is an answer's body that releases its call's context once
// it is closed.
type releaseBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
