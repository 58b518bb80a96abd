package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/store"
)

// fakeElections is a leadership the test hands out and takes back.
type fakeElections struct {
	mu   sync.Mutex
	term Term
	ch   chan struct{}
}

func (e *fakeElections) Leading() Term {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term
}

func (e *fakeElections) Changed() <-chan struct{} { return e.ch }

func (e *fakeElections) set(t Term) {
	e.mu.Lock()
	e.term = t
	e.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
	default:
	}
}

// storeTerm writes to a store until it is over, then refuses as etcd
// refuses a deposed leader.
type storeTerm struct {
	st   store.Store
	mu   sync.Mutex
	over bool
}

func (t *storeTerm) refused(key string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		return fmt.Errorf("key %q: %w", key, ErrDeposed)
	}
	return nil
}

func (t *storeTerm) Put(ctx context.Context, key string, v []byte) (int64, error) {
	if err := t.refused(key); err != nil {
		return 0, err
	}
	return t.st.Put(ctx, key, v)
}

func (t *storeTerm) Delete(ctx context.Context, key string) error {
	if err := t.refused(key); err != nil {
		return err
	}
	return t.st.Delete(ctx, key)
}

func (t *storeTerm) CompareAndSwap(ctx context.Context, key string, rev int64, v []byte) (int64, error) {
	if err := t.refused(key); err != nil {
		return 0, err
	}
	return t.st.CompareAndSwap(ctx, key, rev, v)
}

// noMembers is a membership with no node.
type noMembers struct{}

func (noMembers) Nodes(context.Context) ([]Node, error) { return nil, nil }
func (noMembers) Changed() <-chan struct{}              { return nil }

// work records the establishments and revocations of one subsystem in a
// shared log; its leader work runs until the lead's context ends.
type work struct {
	name string
	log  *callLog
	mu   sync.Mutex
	lead *Lead
	done chan struct{}
}

type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) add(s string) {
	c.mu.Lock()
	c.calls = append(c.calls, s)
	c.mu.Unlock()
}

func (c *callLog) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

func (w *work) Establish(l *Lead) {
	w.log.add("establish " + w.name)
	done := make(chan struct{})
	w.mu.Lock()
	w.lead, w.done = l, done
	w.mu.Unlock()
	go func() { <-l.Context().Done(); close(done) }()
}

func (w *work) Revoke() {
	w.mu.Lock()
	done := w.done
	w.mu.Unlock()
	<-done // the lead's context has ended before Revoke
	w.log.add("revoke " + w.name)
}

func (w *work) current() *Lead {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lead
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHubEstablishRevoke: a term establishes every subsystem in order, its
// end revokes them in reverse order after cancelling the lead, a write
// refused as deposed ends the lead and that term is not led again, and a
// new term leads.
func TestHubEstablishRevoke(t *testing.T) {
	st, err := store.OpenBolt(t.TempDir() + "/store.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	h := NewHub(noMembers{}, clk, quiet)
	calls := &callLog{}
	a, b := &work{name: "a", log: calls}, &work{name: "b", log: calls}
	h.Register(a)
	h.Register(b)
	el := &fakeElections{ch: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx, el); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	if h.Leading() != nil {
		t.Fatal("leading with no term")
	}
	t1 := &storeTerm{st: st}
	el.set(t1)
	waitUntil(t, "the first term established", func() bool { return len(calls.get()) == 2 })
	if got := calls.get(); !slices.Equal(got, []string{"establish a", "establish b"}) {
		t.Fatalf("calls %v", got)
	}
	l := h.Leading()
	if l == nil || a.current() != l || b.current() != l {
		t.Fatal("the subsystems do not share the hub's lead")
	}
	if _, err := l.Put(context.Background(), "/shoal/v1/test/k", []byte("v")); err != nil {
		t.Fatal(err)
	}

	// The term ends in the store before the elector knows: the first
	// refused write ends the lead.
	t1.mu.Lock()
	t1.over = true
	t1.mu.Unlock()
	if _, err := l.Put(context.Background(), "/shoal/v1/test/k", []byte("w")); !errors.Is(err, ErrDeposed) {
		t.Fatalf("write of a deposed term: %v", err)
	}
	waitUntil(t, "the deposed lead revoked", func() bool { return len(calls.get()) == 4 })
	if got := calls.get()[2:]; !slices.Equal(got, []string{"revoke b", "revoke a"}) {
		t.Fatalf("calls %v", got)
	}
	if !l.Deposed() || l.Context().Err() == nil {
		t.Fatal("the deposed lead goes on")
	}
	t1.mu.Lock()
	t1.over = false // the store would take it: the lead refuses it itself
	t1.mu.Unlock()
	if err := l.Delete(context.Background(), "/shoal/v1/test/k"); !errors.Is(err, ErrDeposed) {
		t.Fatalf("write of a revoked lead: %v", err)
	}
	el.set(t1) // the elector still holds the term: it is not led again
	time.Sleep(50 * time.Millisecond)
	if h.Leading() != nil || len(calls.get()) != 4 {
		t.Fatalf("led again under the refused term: %v", calls.get())
	}

	t2 := &storeTerm{st: st}
	el.set(t2)
	waitUntil(t, "the second term established", func() bool { return len(calls.get()) == 6 })
	l2 := h.Leading()
	if l2 == nil || l2 == l {
		t.Fatal("no new lead for the new term")
	}
	el.set(nil)
	waitUntil(t, "the second term revoked", func() bool { return len(calls.get()) == 8 })
	if h.Leading() != nil || l2.Context().Err() == nil {
		t.Fatal("the lead outlived its term")
	}

	// The hub stops: a lead it holds is revoked.
	el.set(&storeTerm{st: st})
	waitUntil(t, "the third term established", func() bool { return len(calls.get()) == 10 })
	cancel()
	<-done
	if got := calls.get()[10:]; !slices.Equal(got, []string{"revoke b", "revoke a"}) {
		t.Fatalf("calls at stop %v", got)
	}
}
