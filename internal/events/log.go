// Package events is shoal's event log: scaling decisions and replica changes,
// each with its reason and inputs, kept in the store under
// store.EventKey(seq) so that every node and a restarted daemon see the same
// history. Sequence numbers only grow, also across restarts and between
// nodes sharing an etcd store; the log keeps the newest events and trims the
// oldest in batches. An Event is the package's own stored record; the API
// shows it as a types.Event (Event.Wire).
package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// DefaultKeep is the number of events a Log keeps when New is given 0.
const DefaultKeep = 10000

// Log is the event log. It is safe for concurrent use.
type Log struct {
	s     store.Store
	clock clock.Clock
	keep  int
	log   *slog.Logger

	mu     sync.Mutex // serialises Emit: seq order is store order
	opened bool
	next   int64 // seq of the next event
	count  int   // events in the store (an estimate between trims)

	trimMu   sync.Mutex
	trimming sync.WaitGroup
	pending  bool // a background trim is running; guarded by mu
}

// retryDelay is the wait between attempts to watch the store again, and
// maxRetries the attempts in a row before a Watch gives up.
const (
	retryDelay = 250 * time.Millisecond
	maxRetries = 40
)

// New returns the log kept in s, holding the last keep events (0:
// DefaultKeep). It reads the store on first use.
func New(s store.Store, c clock.Clock, keep int) *Log {
	if keep <= 0 {
		keep = DefaultKeep
	}
	if c == nil {
		c = clock.Real{}
	}
	return &Log{s: s, clock: c, keep: keep, log: slog.Default()}
}

// batch is how many events beyond keep are let in before a trim.
func (l *Log) batch() int { return l.keep/10 + 1 }

// open finds the highest seq in the store. Called with l.mu held.
func (l *Log) open(ctx context.Context) error {
	kvs, err := l.s.List(ctx, store.EventsPrefix)
	if err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	l.next, l.count = 1, len(kvs)
	if n := len(kvs); n > 0 {
		last, err := store.ParseSeq(kvs[n-1].Key)
		if err != nil {
			return fmt.Errorf("event log: %w", err)
		}
		l.next = last + 1
	}
	l.opened = true
	return nil
}

// Emit appends e to the log and returns it with its Seq, and its Time when
// e had none. Kind and Reason are required.
func (l *Log) Emit(ctx context.Context, e Event) (Event, error) {
	switch {
	case e.Kind == "":
		return Event{}, errdefs.Invalid("kind", "an event needs a kind")
	case e.Reason == "":
		return Event{}, errdefs.Invalid("reason", "event %q needs a reason", e.Kind)
	}
	if e.Time.IsZero() {
		e.Time = l.clock.Now()
	}
	l.mu.Lock()
	trim := false
	err := func() error {
		defer l.mu.Unlock()
		if !l.opened {
			if err := l.open(ctx); err != nil {
				return err
			}
		}
		// Another node may have written the next seq: the write is a
		// create-only compare-and-swap, and a conflict reads the end again.
		for attempt := 0; ; attempt++ {
			e.Seq = l.next
			b, err := json.Marshal(e)
			if err != nil {
				return fmt.Errorf("event %q: %w", e.Kind, err)
			}
			_, err = l.s.CompareAndSwap(ctx, store.EventKey(e.Seq), 0, b)
			if err == nil {
				break
			}
			if !errdefs.IsConflict(err) || attempt >= 100 {
				return fmt.Errorf("event %q: seq %d: %w", e.Kind, e.Seq, err)
			}
			if err := l.open(ctx); err != nil {
				return err
			}
			if l.next <= e.Seq {
				l.next = e.Seq + 1
			}
		}
		l.next = e.Seq + 1
		l.count++
		if l.count > l.keep+l.batch() && !l.pending {
			l.pending, trim = true, true
			l.trimming.Add(1)
		}
		return nil
	}()
	if err != nil {
		return Event{}, err
	}
	if trim {
		// Deleting a batch takes a while on bolt (one commit each); the
		// emitter does not wait for it.
		go func() {
			defer l.trimming.Done()
			if err := l.Trim(context.WithoutCancel(ctx)); err != nil {
				l.log.Warn("event log: trim failed", "err", err)
			}
			l.mu.Lock()
			l.pending = false
			l.mu.Unlock()
		}()
	}
	return e, nil
}

// Trim deletes the oldest events beyond the number the log keeps. Emit calls
// it in the background once a batch of events has piled up.
func (l *Log) Trim(ctx context.Context) error {
	l.trimMu.Lock()
	defer l.trimMu.Unlock()
	kvs, err := l.s.List(ctx, store.EventsPrefix)
	if err != nil {
		return err
	}
	extra := len(kvs) - l.keep
	for i := 0; i < extra; i++ {
		if err := l.s.Delete(ctx, kvs[i].Key); err != nil && !errdefs.IsNotFound(err) {
			l.setCount(len(kvs) - i)
			return fmt.Errorf("event log: trim %s: %w", kvs[i].Key, err)
		}
	}
	l.setCount(min(len(kvs), l.keep))
	return nil
}

func (l *Log) setCount(n int) {
	l.mu.Lock()
	l.count = n
	l.mu.Unlock()
}

// List returns the kept events with a seq above after, oldest first, of one
// app or of all ("").
func (l *Log) List(ctx context.Context, after int64, app string) ([]Event, error) {
	kvs, err := l.s.List(ctx, store.EventsPrefix)
	if err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	out := []Event{}
	for _, kv := range kvs {
		if e, ok := l.decode(kv, after, app); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// decode reads an event and reports whether it passes the filter.
func (l *Log) decode(kv store.KV, after int64, app string) (Event, bool) {
	seq, err := store.ParseSeq(kv.Key)
	if err != nil || seq <= after {
		return Event{}, false
	}
	var e Event
	if err := json.Unmarshal(kv.Value, &e); err != nil {
		l.log.Warn("event log: unreadable event", "key", kv.Key, "err", err)
		return Event{}, false
	}
	e.Seq = seq
	return e, app == "" || e.App == app
}

// Watch streams the events with a seq above after, of one app or of all
// (""): first those kept, then each new one, in seq order with no duplicates
// and no gaps, until ctx ends; the channel is then closed. When the store's
// watch ends early, the log is read again from the last event sent.
func (l *Log) Watch(ctx context.Context, after int64, app string) (<-chan Event, error) {
	// Watch before listing: what is written in between comes through both
	// and the seq filter drops the second copy.
	wctx, cancel := context.WithCancel(ctx)
	wch, err := l.s.Watch(wctx, store.EventsPrefix)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("event log: watch: %w", err)
	}
	first, err := l.List(ctx, after, app)
	if err != nil {
		cancel()
		return nil, err
	}
	out := make(chan Event, 64)
	go func() {
		defer close(out)
		defer func() { cancel() }()
		last := after
		send := func(evs []Event) bool {
			for _, e := range evs {
				if e.Seq <= last {
					continue
				}
				select {
				case out <- e:
					last = e.Seq
				case <-ctx.Done():
					return false
				}
			}
			return true
		}
		if !send(first) {
			return
		}
		for {
			for ev := range wch {
				if ev.Type != store.EventPut {
					continue
				}
				if e, ok := l.decode(ev.KV, last, app); ok && !send([]Event{e}) {
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			// The store's watch ended early: watch again, then catch up.
			cancel()
			failures := 0
			for {
				wctx, cancel = context.WithCancel(ctx)
				wch, err = l.s.Watch(wctx, store.EventsPrefix)
				if err == nil {
					var evs []Event
					if evs, err = l.List(ctx, last, app); err == nil {
						if !send(evs) {
							return
						}
						break
					}
					cancel()
				}
				failures++
				if ctx.Err() != nil || errdefs.IsInvalid(err) || failures >= maxRetries {
					l.log.Warn("event log: watch ended", "err", err)
					return
				}
				if !l.pause(ctx) {
					return
				}
			}
		}
	}()
	return out, nil
}

// pause waits a moment before a retry, or returns false when ctx ends.
func (l *Log) pause(ctx context.Context) bool {
	t := l.clock.NewTimer(retryDelay)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
