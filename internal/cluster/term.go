package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// Term is one leadership of the cluster, as every leader-only subsystem
// (serving's controllers, the job queue's assignment, the routes) writes
// through it: a write succeeds only while the term lasts, and is refused
// after with an error wrapping ErrDeposed. An *EtcdTerm is one; the Hub
// hands out each term bounded (Bounded) and watched for its end.
type Term interface {
	// Put writes key.
	Put(ctx context.Context, key string, value []byte) (int64, error)
	// Delete removes key (a key already gone is no error).
	Delete(ctx context.Context, key string) error
	// CompareAndSwap writes key if its ModRev is still rev (0: the key
	// must not exist); a changed key is an errdefs.ErrConflict that is not
	// ErrDeposed.
	CompareAndSwap(ctx context.Context, key string, rev int64, value []byte) (int64, error)
}

// ErrDeposed is wrapped by a Term's write once the term is over. It is a
// conflict too (errdefs.IsConflict).
var ErrDeposed = fmt.Errorf("not the leader any more: %w", errdefs.ErrConflict)

// WriteBound bounds each write of a term: a leader cut off from the store
// gives the write up (an error wrapping ErrNoAnswer) rather than hold up
// its subsystem; the subsystem tries again later.
const WriteBound = 5 * time.Second

// ErrNoAnswer is the cause of a term's write given up after WriteBound.
var ErrNoAnswer = fmt.Errorf("no answer from the store within %v", WriteBound)

// Bounded returns t with each write bounded by WriteBound on clk.
func Bounded(t Term, clk clock.Clock) Term { return bounded{t: t, clk: clk} }

type bounded struct {
	t   Term
	clk clock.Clock
}

// within runs write with a context that ends after WriteBound on the clock.
func (b bounded) within(ctx context.Context, key string, write func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tm := b.clk.AfterFunc(WriteBound, func() { cancel(ErrNoAnswer) })
	defer tm.Stop()
	err := write(ctx)
	if err != nil && errors.Is(context.Cause(ctx), ErrNoAnswer) {
		return fmt.Errorf("key %s: %w: %w", key, ErrNoAnswer, err)
	}
	return err
}

func (b bounded) Put(ctx context.Context, key string, value []byte) (rev int64, err error) {
	err = b.within(ctx, key, func(ctx context.Context) (err error) {
		rev, err = b.t.Put(ctx, key, value)
		return err
	})
	return rev, err
}

func (b bounded) Delete(ctx context.Context, key string) error {
	return b.within(ctx, key, func(ctx context.Context) error { return b.t.Delete(ctx, key) })
}

func (b bounded) CompareAndSwap(ctx context.Context, key string, rev int64, value []byte) (nrev int64, err error) {
	err = b.within(ctx, key, func(ctx context.Context) (err error) {
		nrev, err = b.t.CompareAndSwap(ctx, key, rev, value)
		return err
	})
	return nrev, err
}
