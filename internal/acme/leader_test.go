package acme

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/store"
)

// elections is a leadership the test hands out and takes back.
type elections struct {
	mu   sync.Mutex
	term cluster.Term
	ch   chan struct{}
}

func (e *elections) Leading() cluster.Term {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term
}

func (e *elections) Changed() <-chan struct{} { return e.ch }

func (e *elections) set(t cluster.Term) {
	e.mu.Lock()
	e.term = t
	e.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
	default:
	}
}

// term writes to a store until it is over, then refuses as etcd refuses
// a deposed leader; it counts what it refused.
type term struct {
	st      store.Store
	mu      sync.Mutex
	over    bool
	refused int
}

func (t *term) check(key string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		t.refused++
		return fmt.Errorf("key %q: %w", key, cluster.ErrDeposed)
	}
	return nil
}

func (t *term) end() {
	t.mu.Lock()
	t.over = true
	t.mu.Unlock()
}

func (t *term) Put(ctx context.Context, key string, v []byte) (int64, error) {
	if err := t.check(key); err != nil {
		return 0, err
	}
	return t.st.Put(ctx, key, v)
}

func (t *term) Delete(ctx context.Context, key string) error {
	if err := t.check(key); err != nil {
		return err
	}
	return t.st.Delete(ctx, key)
}

func (t *term) CompareAndSwap(ctx context.Context, key string, rev int64, v []byte) (int64, error) {
	if err := t.check(key); err != nil {
		return 0, err
	}
	return t.st.CompareAndSwap(ctx, key, rev, v)
}

type noMembers struct{}

func (noMembers) Nodes(context.Context) ([]cluster.Node, error) { return nil, nil }
func (noMembers) Changed() <-chan struct{}                      { return nil }

// In a cluster only the leader orders, its writes fenced by its term; a
// node that loses the lead stops, and the next leader renews the
// certificate the first one issued, from what the store holds.
func TestLeaderOrdersAndTheNextRenews(t *testing.T) {
	r := newRig(t) // its own Manager runs on the rig's store: stopped below
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.stopRun()
	const domain = "lead.shoal.test"
	if _, err := store.ClaimDomains(ctx, r.st, "web", []string{domain}); err != nil {
		t.Fatal(err)
	}
	node := func() (*elections, *Manager) {
		m, err := New(r.m.o)
		if err != nil {
			t.Fatal(err)
		}
		el := &elections{ch: make(chan struct{}, 1)}
		hub := cluster.NewHub(noMembers{}, r.clk, nil)
		hub.Register(m)
		done := make(chan struct{})
		go func() { defer close(done); hub.Run(ctx, el) }()
		t.Cleanup(func() { cancel(); <-done })
		return el, m
	}
	elA, _ := node()
	elB, _ := node()
	termA := &term{st: r.st}
	elA.set(termA)
	first := r.issued(t, domain, time.Time{})
	// A loses the lead; B leads and renews once the certificate is near
	// its end.
	termA.end()
	elA.set(nil)
	elB.set(&term{st: r.st})
	r.clk.Set(RenewAt(first.NotBefore, first.NotAfter).Add(time.Second))
	second := r.issued(t, domain, first.RenewedAt)
	if serial(t, second) == serial(t, first) {
		t.Fatal("renewed, yet the same certificate")
	}
	termA.mu.Lock()
	refused := termA.refused
	termA.mu.Unlock()
	if refused != 0 {
		t.Fatalf("the deposed leader tried %d writes", refused)
	}
}
