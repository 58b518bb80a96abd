package store

import (
	"context"
	"strings"
)

// boltWatcher is one Watch call. Its channel is its queue: the writer never
// blocks on it. A watcher that lets WithWatchBuffer events pile up has its
// channel closed after the events already queued; the caller then lists the
// prefix again and starts a new Watch, exactly as after a compacted etcd
// watch.
type boltWatcher struct {
	prefix string
	ch     chan Event
}

// Watch streams every change under prefix made after Watch returns, in
// revision order. The channel is closed when ctx ends, when the store is
// closed, or when the caller falls more than the watch buffer behind; in
// the last case the caller should List and Watch again.
func (b *Bolt) Watch(ctx context.Context, prefix string) (<-chan Event, error) {
	if err := ctxErr(ctx, prefix); err != nil {
		return nil, err
	}
	w := &boltWatcher{prefix: prefix, ch: make(chan Event, b.watchBuf)}
	// Registering under the write lock puts the watch between two writes:
	// it sees every write that commits after it returns, and none before.
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, wrapKey(prefix, errClosed)
	}
	b.watchers[w] = struct{}{}
	b.mu.Unlock()

	go func() {
		select {
		case <-ctx.Done():
		case <-b.done:
		}
		b.mu.Lock()
		b.dropWatcherLocked(w)
		b.mu.Unlock()
	}()
	return w.ch, nil
}

// publishLocked hands committed events to matching watchers, in order.
func (b *Bolt) publishLocked(events []Event) {
	for _, ev := range events {
		for w := range b.watchers {
			if !strings.HasPrefix(ev.KV.Key, w.prefix) {
				continue
			}
			select {
			case w.ch <- ev:
			default:
				b.log.Warn("store watcher fell behind; closing its channel",
					"path", b.path, "prefix", w.prefix, "buffer", cap(w.ch), "rev", ev.KV.ModRev)
				b.dropWatcherLocked(w)
			}
		}
	}
}

func (b *Bolt) dropWatcherLocked(w *boltWatcher) {
	if _, ok := b.watchers[w]; ok {
		delete(b.watchers, w)
		close(w.ch)
	}
}
