package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// LeaderWork is the work of a leader-only subsystem: serving's controllers, the job
// queue's assignment, the routes. The Hub establishes its leader work when
// this node gains leadership and revokes it when the node loses it (Nomad's
// establishLeadership / revokeLeadership).
type LeaderWork interface {
	// Establish starts the subsystem's leader work under lead l and
	// returns at once; l.Context() ends with the term.
	Establish(l *Lead)
	// Revoke stops the work Establish started and returns once it has
	// stopped.
	Revoke()
}

// Elections is the leadership the Hub follows: an *Elector.
type Elections interface {
	// Leading returns the current term while this node leads, else nil.
	Leading() Term
	// Changed gets a value after each change of leadership.
	Changed() <-chan struct{}
}

// Members is the cluster's membership the Hub hands its subsystems.
type Members interface {
	// Nodes returns the live nodes (ready or draining) with their records.
	Nodes(ctx context.Context) ([]Node, error)
	// Changed returns a channel that gets a value after each change of the
	// live set or of a node record (changes close together may be told
	// once).
	Changed() <-chan struct{}
}

// Hub is this node's leadership as every leader-only subsystem sees it:
// the current term, the live nodes and a change signal. Run is its one
// loop: on each new term it establishes every registered subsystem under
// one Lead, in the order registered, and when the term ends (another node
// leads, the session is lost, or a write of the term is refused) it
// cancels the Lead and revokes them in reverse order, waiting for each.
type Hub struct {
	Members
	clk clock.Clock
	log *slog.Logger

	mu     sync.Mutex
	leads  []LeaderWork
	lead   *Lead
	kick   chan struct{}
	closed bool
}

// NewHub returns a Hub over members, whose writes are bounded on clk.
func NewHub(members Members, clk clock.Clock, log *slog.Logger) *Hub {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hub{Members: members, clk: clk, log: log, kick: make(chan struct{}, 1)}
}

// Register adds a leader-only subsystem; call it before Run.
func (h *Hub) Register(l LeaderWork) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leads = append(h.leads, l)
}

// Leading returns the current lead while this node leads, else nil.
func (h *Hub) Leading() *Lead {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lead
}

// Run follows el until ctx ends, then revokes the lead it holds.
func (h *Hub) Run(ctx context.Context, el Elections) {
	changed := el.Changed()
	var deposed Term // a term whose write was refused: never led again
	for {
		t := el.Leading()
		h.mu.Lock()
		cur := h.lead
		h.mu.Unlock()
		if cur != nil && (cur.term != t || cur.deposed.Load()) {
			if cur.deposed.Load() {
				deposed = cur.term
			}
			h.revoke(cur)
			cur = nil
		}
		if cur == nil && t != nil && t != deposed {
			h.establish(ctx, t)
		}
		select {
		case <-ctx.Done():
			h.mu.Lock()
			cur := h.lead
			h.mu.Unlock()
			if cur != nil {
				h.revoke(cur)
			}
			return
		case <-changed:
		case <-h.kick:
		}
	}
}

// establish starts every subsystem's leader work under a new lead of t.
func (h *Hub) establish(ctx context.Context, t Term) {
	l := &Lead{term: t, write: Bounded(t, h.clk), hub: h}
	l.ctx, l.cancel = context.WithCancel(ctx)
	h.mu.Lock()
	h.lead = l
	leads := append([]LeaderWork(nil), h.leads...)
	h.mu.Unlock()
	h.log.Info("cluster: leading: establishing the leader's work", "subsystems", len(leads))
	for _, s := range leads {
		s.Establish(l)
	}
}

// revoke ends lead l and stops every subsystem's leader work, the last
// established first.
func (h *Hub) revoke(l *Lead) {
	start := h.clk.Now()
	h.mu.Lock()
	if h.lead == l {
		h.lead = nil
	}
	leads := append([]LeaderWork(nil), h.leads...)
	h.mu.Unlock()
	l.cancel()
	for i := len(leads) - 1; i >= 0; i-- {
		leads[i].Revoke()
	}
	h.log.Info("cluster: not leading: the leader's work stopped", "deposed", l.deposed.Load(),
		"took", h.clk.Since(start).Round(time.Millisecond))
}

func (h *Hub) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Lead is one term of this node's leadership as the subsystems see it: a
// Term whose writes are bounded by WriteBound, and a context that ends with
// the term. A write refused because the term is over (ErrDeposed) ends the
// lead at once: the Hub revokes it and does not lead under that term again.
// Once the lead is revoked its writes are refused here (ErrDeposed), even
// where the store would still take them.
type Lead struct {
	term    Term
	write   Term
	hub     *Hub
	ctx     context.Context
	cancel  context.CancelFunc
	deposed atomic.Bool
}

// Context ends when the term does.
func (l *Lead) Context() context.Context { return l.ctx }

// Deposed reports whether a write of the lead was refused.
func (l *Lead) Deposed() bool { return l.deposed.Load() }

// refused notes a write refused because the term is over.
func (l *Lead) refused(err error) error {
	if errors.Is(err, ErrDeposed) && !l.deposed.Swap(true) {
		l.hub.log.Warn("cluster: a write of this node's term was refused: it leads no more", "err", err)
		l.hub.poke()
	}
	return err
}

// over is the error of a write after the lead ended, else nil.
func (l *Lead) over(key string) error {
	if l.ctx.Err() != nil {
		return fmt.Errorf("key %q: this node's lead has ended: %w", key, ErrDeposed)
	}
	return nil
}

// Put writes key while the term lasts (bounded by WriteBound).
func (l *Lead) Put(ctx context.Context, key string, value []byte) (int64, error) {
	if err := l.over(key); err != nil {
		return 0, err
	}
	rev, err := l.write.Put(ctx, key, value)
	return rev, l.refused(err)
}

// Delete removes key while the term lasts (bounded by WriteBound).
func (l *Lead) Delete(ctx context.Context, key string) error {
	if err := l.over(key); err != nil {
		return err
	}
	return l.refused(l.write.Delete(ctx, key))
}

// CompareAndSwap writes key at rev while the term lasts (bounded by
// WriteBound).
func (l *Lead) CompareAndSwap(ctx context.Context, key string, rev int64, value []byte) (int64, error) {
	if err := l.over(key); err != nil {
		return 0, err
	}
	nrev, err := l.write.CompareAndSwap(ctx, key, rev, value)
	return nrev, l.refused(err)
}

var _ Term = (*Lead)(nil)
