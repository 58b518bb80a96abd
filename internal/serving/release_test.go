package serving

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/network"
)

// heldNet is fakeNet that keeps count of the attachments out, and holds
// the first Acquire, its namespace made, until the test lets it go.
type heldNet struct {
	entered chan struct{} // closed when the first Acquire is under way
	proceed chan struct{} // closed by the test to let it return

	mu   sync.Mutex
	n    int
	held map[string]bool
}

func newHeldNet() *heldNet {
	return &heldNet{entered: make(chan struct{}), proceed: make(chan struct{}), held: map[string]bool{}}
}

func (h *heldNet) Acquire(_ context.Context, id string, _ network.Mode) (*network.Attachment, error) {
	h.mu.Lock()
	h.n++
	first := h.n == 1
	h.held[id] = true
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.proceed
	}
	return &network.Attachment{ID: id, IP: net.IPv4(127, 0, 0, 1)}, nil
}

func (h *heldNet) Lookup(string) (*network.Attachment, bool)           { return nil, false }
func (h *heldNet) SetPolicy(*network.Attachment, network.Policy) error { return nil }

func (h *heldNet) Release(_ context.Context, a *network.Attachment) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.held, a.ID)
	return nil
}

func (h *heldNet) out() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// An app deleted while a replica's namespace is being made: the namespace
// is released once it is made, not left attached.
func TestRemoveWhileAcquiring(t *testing.T) {
	hn := newHeldNet()
	h := newHarnessWith(t, 1<<40, hn)
	h.deploy("min = 1")
	<-hn.entered
	if err := h.m.Remove(context.Background(), "hello"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	close(hn.proceed)
	for deadline := time.Now().Add(60 * time.Second); hn.out() != 0 || h.rt.count() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("after the app was removed: %d namespaces attached, %d containers", hn.out(), h.rt.count())
		}
		time.Sleep(time.Millisecond)
	}
}

// An app deleted, and the daemon stopped, while a replica's namespace is
// being made: the namespace is released all the same.
func TestRemoveAndCloseWhileAcquiring(t *testing.T) {
	hn := newHeldNet()
	h := newHarnessWith(t, 1<<40, hn)
	h.deploy("min = 1")
	<-hn.entered
	if err := h.m.Remove(context.Background(), "hello"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	closed := make(chan struct{})
	go func() {
		h.m.Close()
		close(closed)
	}()
	<-h.m.ctx.Done()
	close(hn.proceed)
	<-closed
	if n := hn.out(); n != 0 {
		t.Fatalf("%d namespaces still attached after Close", n)
	}
}

// The daemon stopping while a replica's namespace is being made: Close
// returns only once the start is undone and the namespace released.
func TestCloseWhileAcquiring(t *testing.T) {
	hn := newHeldNet()
	h := newHarnessWith(t, 1<<40, hn)
	h.deploy("min = 1")
	<-hn.entered
	closed := make(chan struct{})
	go func() {
		h.m.Close()
		close(closed)
	}()
	<-h.m.ctx.Done()
	close(hn.proceed)
	<-closed
	if n := hn.out(); n != 0 {
		t.Fatalf("%d namespaces still attached after Close", n)
	}
	if n := h.rt.count(); n != 0 {
		t.Fatalf("%d containers left after Close", n)
	}
}
