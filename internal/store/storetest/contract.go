// Package storetest holds the contract every store.Store implementation
// passes, and a launcher for a real etcd server that tests of any package can
// use.
//
// A backend's test calls Run with a function that opens a fresh, empty store:
//
//	storetest.Run(t, func(t *testing.T) store.Store { ... },
//		storetest.WithAdvance(func(s store.Store, d time.Duration) { fake.Advance(d) }))
//
// Lease expiry is checked by letting a lease's TTL pass: on a store whose
// leases run on a fake clock, WithAdvance moves that clock; otherwise the
// suite waits in real time for the expiry events (with a generous deadline,
// never asserting how long they took).
package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Option adapts Run to a backend.
type Option func(*suite)

// WithAdvance tells the suite how to make time pass for the leases of a
// store s: advance(s, d) moves s's clock forward by d. Without it the suite
// waits for leases to expire in real time.
func WithAdvance(advance func(s store.Store, d time.Duration)) Option {
	return func(c *suite) { c.advance = advance }
}

// WithLeaseTTL sets the TTL of the leases the suite lets expire (default
// 1s; etcd raises anything below its minimum TTL to that minimum).
func WithLeaseTTL(d time.Duration) Option { return func(c *suite) { c.ttl = d } }

// WithEventTimeout sets how long the suite waits for an event before it
// fails (default 30s). It bounds a wait; it is not a speed assertion.
func WithEventTimeout(d time.Duration) Option { return func(c *suite) { c.wait = d } }

type suite struct {
	open    func(t *testing.T) store.Store
	advance func(s store.Store, d time.Duration)
	ttl     time.Duration
	wait    time.Duration
}

// Run runs the store contract as subtests. open must return a new, empty
// store for each call; Run closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) store.Store, opts ...Option) {
	s := &suite{open: open, ttl: time.Second, wait: 30 * time.Second}
	for _, o := range opts {
		o(s)
	}
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"PutGetDelete", s.testPutGetDelete},
		{"NotFound", s.testNotFound},
		{"EmptyKey", s.testEmptyKey},
		{"RevisionsIncrease", s.testRevisionsIncrease},
		{"CreateRevKept", s.testCreateRevKept},
		{"ListOrderAndIsolation", s.testList},
		{"CASCreateOnly", s.testCASCreateOnly},
		{"CASSwap", s.testCASSwap},
		{"CASConflict", s.testCASConflict},
		{"CASConcurrentIncrements", s.testCASConcurrent},
		{"WatchOrderAndPrefix", s.testWatchOrder},
		{"WatchStartsAfterCall", s.testWatchStartsAfterCall},
		{"WatchStopsOnCancel", s.testWatchCancel},
		{"LeaseExpiry", s.testLeaseExpiry},
		{"LeaseRevoke", s.testLeaseRevoke},
		{"LeaseDetach", s.testLeaseDetach},
		{"LeaseErrors", s.testLeaseErrors},
		{"IDRangeClaims", s.testIDRangeClaims},
		{"IDRangeConcurrentClaims", s.testIDRangeConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := s.open(t)
			t.Cleanup(func() {
				if err := st.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			tc.fn(t, st)
		})
	}
}

// ctx returns a context that ends with the test.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

func put(t *testing.T, s store.Store, key, value string, opts ...store.PutOption) int64 {
	t.Helper()
	rev, err := s.Put(ctx(t), key, []byte(value), opts...)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return rev
}

func get(t *testing.T, s store.Store, key string) store.KV {
	t.Helper()
	kv, err := s.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return kv
}

// wantErr fails unless err is in category want and names the object.
func wantErr(t *testing.T, what string, err, want error, object string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
	if !strings.Contains(err.Error(), object) {
		t.Fatalf("%s: error %q does not name %q", what, err, object)
	}
}

// recv waits for the next event on ch.
func (s *suite) recv(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	timer := time.NewTimer(s.wait)
	defer timer.Stop()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("watch channel closed while an event was expected")
		}
		return ev
	case <-timer.C:
		t.Fatalf("no event within %s", s.wait)
	}
	return store.Event{}
}

// expect reads len(want) events and checks their types and keys, and that
// their revisions increase.
func (s *suite) expect(t *testing.T, ch <-chan store.Event, want ...store.Event) []store.Event {
	t.Helper()
	var got []store.Event
	var last int64
	for i, w := range want {
		ev := s.recv(t, ch)
		if ev.Type != w.Type || ev.KV.Key != w.KV.Key {
			t.Fatalf("event %d: got %s %q, want %s %q", i, ev.Type, ev.KV.Key, w.Type, w.KV.Key)
		}
		if ev.KV.ModRev <= last {
			t.Fatalf("event %d (%s %q): revision %d not after %d", i, ev.Type, ev.KV.Key, ev.KV.ModRev, last)
		}
		last = ev.KV.ModRev
		got = append(got, ev)
	}
	return got
}

func putEv(key string) store.Event { return store.Event{Type: store.EventPut, KV: store.KV{Key: key}} }
func delEv(key string) store.Event {
	return store.Event{Type: store.EventDelete, KV: store.KV{Key: key}}
}

var (
	errNotFound = errdefs.ErrNotFound
	errConflict = errdefs.ErrConflict
)
