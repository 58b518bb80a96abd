package containers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

// fakeImages is an image store of digests.
type fakeImages struct {
	mu  sync.Mutex
	has map[string]bool
}

func (f *fakeImages) Get(_ context.Context, ref string) (image.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.has[ref] {
		return image.Image{}, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return image.Image{Digest: ref}, nil
}

func (f *fakeImages) remove(d string) {
	f.mu.Lock()
	delete(f.has, d)
	f.mu.Unlock()
}

// noContainers is a runtime that lists no container.
type noContainers struct{ containerRuntime }

func (noContainers) List(context.Context) ([]*runtime.Container, error) { return nil, nil }

// poolService is a service keeping premade containers that its make and
// destroy only record: made and destroyed, by image digest.
type poolService struct {
	*Service
	imgs            *fakeImages
	mu              sync.Mutex
	made, destroyed map[string][]*premade
}

func newPoolService(digests ...string) *poolService {
	f := &fakeImages{has: map[string]bool{}}
	for _, d := range digests {
		f.has[d] = true
	}
	s := &Service{rt: noContainers{}, imgs: f, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		starting: map[string]int{}, hidden: map[string]bool{}, taken: map[string]taken{}}
	s.pool.init = "/shoal-init"
	s.pool.ready, s.pool.making, s.pool.work = map[shape]*premade{}, map[shape]chan struct{}{}, map[chan struct{}]string{}
	ps := &poolService{Service: s, imgs: f, made: map[string][]*premade{}, destroyed: map[string][]*premade{}}
	s.pool.make = func(sh shape, _ *runPlan, _ string) (*premade, error) {
		b := &premade{id: newID(12), shape: sh}
		ps.mu.Lock()
		ps.made[sh.digest] = append(ps.made[sh.digest], b)
		ps.mu.Unlock()
		return b, nil
	}
	s.pool.destroy = func(b *premade) {
		ps.mu.Lock()
		ps.destroyed[b.shape.digest] = append(ps.destroyed[b.shape.digest], b)
		ps.mu.Unlock()
	}
	return ps
}

// plan returns a --rm run's plan of image digest, its shape counted as run.
func (ps *poolService) plan(digest string) *runPlan {
	p := &runPlan{remove: true, digest: digest, mode: network.None, spec: runtime.Spec{Limits: runtime.Limits{Pids: defaultPids}}}
	ps.Service.mu.Lock()
	ps.touch(p.shape())
	ps.Service.mu.Unlock()
	return p
}

// settle waits until the background work has ended.
func (ps *poolService) settle() {
	for {
		ps.Service.mu.Lock()
		var work []chan struct{}
		for c := range ps.pool.work {
			work = append(work, c)
		}
		ps.Service.mu.Unlock()
		if len(work) == 0 {
			return
		}
		for _, c := range work {
			<-c
		}
	}
}

func (ps *poolService) ready(p *runPlan) *premade {
	ps.Service.mu.Lock()
	defer ps.Service.mu.Unlock()
	return ps.pool.ready[p.shape()]
}

// The refill after a run of an image may come once the image's removal
// has checked its users, before or after the image is gone: it makes no
// premade container of the image. The removal drops the premade
// containers of that image only.
func TestRefillDuringImageRemoval(t *testing.T) {
	ps := newPoolService("sha256:a", "sha256:b")
	pa, pb := ps.plan("sha256:a"), ps.plan("sha256:b")
	ps.refill(pb)
	ps.settle()
	kept := ps.ready(pb)
	if kept == nil {
		t.Fatal("no premade container of image b")
	}

	user, release, err := ps.HoldImage(context.Background(), "sha256:a")
	if err != nil || user != "" {
		t.Fatalf("HoldImage = %q, %v; want image a free", user, err)
	}
	ps.refill(pa) // the run's refill, after the check, before the removal
	ps.imgs.remove("sha256:a")
	release()
	ps.settle()
	ps.refill(pa) // the same, after the removal
	ps.settle()

	if b := ps.ready(pa); b != nil {
		t.Fatalf("premade container %s of removed image a is kept", b.id)
	}
	if n := len(ps.made["sha256:a"]); n != len(ps.destroyed["sha256:a"]) {
		t.Fatalf("%d premade containers of removed image a made, %d removed", n, len(ps.destroyed["sha256:a"]))
	}
	if ps.ready(pb) != kept || len(ps.destroyed["sha256:b"]) != 0 {
		t.Fatalf("image b's premade container was dropped by image a's removal (removed: %d)", len(ps.destroyed["sha256:b"]))
	}
}

// An image's removal waits for a premade container of it being made and
// removes it.
func TestImageRemovalWaitsForRefill(t *testing.T) {
	ps := newPoolService("sha256:a")
	pa := ps.plan("sha256:a")
	entered, proceed := make(chan struct{}), make(chan struct{})
	record := ps.pool.make
	ps.pool.make = func(sh shape, p *runPlan, init string) (*premade, error) {
		close(entered)
		<-proceed
		return record(sh, p, init)
	}
	ps.refill(pa)
	<-entered
	type held struct {
		user    string
		release func()
		err     error
	}
	done := make(chan held, 1)
	go func() {
		u, r, err := ps.HoldImage(context.Background(), "sha256:a")
		done <- held{u, r, err}
	}()
	close(proceed)
	h := <-done
	if h.err != nil || h.user != "" {
		t.Fatalf("HoldImage = %q, %v; want image a free", h.user, h.err)
	}
	ps.mu.Lock()
	made, destroyed := len(ps.made["sha256:a"]), len(ps.destroyed["sha256:a"])
	ps.mu.Unlock()
	if made != 1 || destroyed != 1 || ps.ready(pa) != nil {
		t.Fatalf("HoldImage returned with %d premade containers of image a made, %d removed, ready %v", made, destroyed, ps.ready(pa))
	}
	h.release()
}
