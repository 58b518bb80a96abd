package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// hangingTerm blocks every write until its context ends, as the writes of
// a leader cut off from etcd do.
type hangingTerm struct{ started chan struct{} }

func (h hangingTerm) wait(ctx context.Context) error {
	h.started <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

func (h hangingTerm) Put(ctx context.Context, _ string, _ []byte) (int64, error) {
	return 0, h.wait(ctx)
}
func (h hangingTerm) Delete(ctx context.Context, _ string) error { return h.wait(ctx) }
func (h hangingTerm) CompareAndSwap(ctx context.Context, _ string, _ int64, _ []byte) (int64, error) {
	return 0, h.wait(ctx)
}

// TestBoundedWrite: a bounded term gives a write up after WriteBound on its
// clock, not before, with an error wrapping ErrNoAnswer.
func TestBoundedWrite(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	h := hangingTerm{started: make(chan struct{}, 1)}
	b := Bounded(h, clk)
	for name, write := range map[string]func() error{
		"put":    func() error { _, err := b.Put(context.Background(), "k", nil); return err },
		"delete": func() error { return b.Delete(context.Background(), "k") },
		"cas":    func() error { _, err := b.CompareAndSwap(context.Background(), "k", 1, nil); return err },
	} {
		errc := make(chan error, 1)
		go func() { errc <- write() }()
		<-h.started
		clk.Advance(WriteBound - time.Millisecond)
		select {
		case err := <-errc:
			t.Fatalf("%s: given up before WriteBound: %v", name, err)
		case <-time.After(50 * time.Millisecond):
		}
		clk.Advance(time.Millisecond)
		if err := <-errc; !errors.Is(err, ErrNoAnswer) {
			t.Fatalf("%s: %v; want ErrNoAnswer", name, err)
		}
	}
}
