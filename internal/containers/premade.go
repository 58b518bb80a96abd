package containers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/sandbox/stub"
)

// PremadeShapes bounds the shapes of `run --rm` kept made ahead, one
// sandbox each: the most recently run ones.
const PremadeShapes = 4

// shape is what a premade sandbox is made for: the image, the network
// mode and the limits. The command, its environment on top of the
// image's and its working directory are what its shoal-init reads when a
// run takes it.
type shape struct {
	digest string
	mode   network.Mode
	limits runtime.Limits
}

// premade is a `run --rm` container made ahead: its namespaces, cgroup
// with the shape's limits, root file system and network, with shoal-init
// as its pid 1 waiting on stdin for the command it then execs.
type premade struct {
	id         string
	shape      shape
	att        *network.Attachment
	stdin      *os.File // write end: the command (stub.Encode), then closed
	outR, errR *os.File
}

// premadePool keeps at most one premade sandbox for each of the
// PremadeShapes shapes run most recently. A run that takes one has it
// made again in the background once it has ended; a run of a shape that
// has none takes the ordinary path and has one made. What it makes is
// hidden from List, HoldImage and Remove until a run takes it.
type premadePool struct {
	init   string // host path of shoal-init; "": none is made
	ready  map[shape]*premade
	making map[shape]chan struct{}  // closed when it is ready or failed
	recent []shape                  // most recently run first
	work   map[chan struct{}]string // background work → the image digest it uses
	gen    int                      // dropped premades: those being made then are not kept
	closed bool
	// make and destroy are makePremade and destroyPremade (tests fake them).
	make    func(sh shape, p *runPlan, init string) (*premade, error)
	destroy func(b *premade)
}

// taken is what List shows of a premade container a run took: the run's
// labels (its image reference and command) and when it took it.
type taken struct {
	labels  map[string]string
	created time.Time
}

// KeepPremade has `run --rm` take containers made ahead (see
// premadePool), whose pid 1 is shoal-init at host path init until the
// run's command replaces it; "" makes none.
func (s *Service) KeepPremade(init string) {
	s.mu.Lock()
	s.pool.init = init
	s.mu.Unlock()
}

func (p *runPlan) shape() shape {
	return shape{digest: p.digest, mode: p.mode, limits: p.spec.Limits}
}

// takePremade returns a premade sandbox of p's shape, or nil, and counts
// the shape as run now. One being made is waited for: begun before this
// run, it is ready sooner than the ordinary path would make another.
func (s *Service) takePremade(ctx context.Context, p *runPlan) *premade {
	sh := p.shape()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool.init == "" || s.pool.closed {
		return nil
	}
	s.touch(sh)
	b := s.pool.ready[sh]
	if b == nil {
		making := s.pool.making[sh]
		if making == nil {
			return nil
		}
		s.mu.Unlock()
		select {
		case <-making:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if b = s.pool.ready[sh]; b == nil {
			return nil
		}
	}
	delete(s.pool.ready, sh)
	delete(s.hidden, b.id)
	s.taken[b.id] = taken{labels: p.spec.Labels, created: time.Now()}
	return b
}

// touch makes sh the most recently run shape; those past PremadeShapes
// lose their premade sandbox. s.mu is held.
func (s *Service) touch(sh shape) {
	r := s.pool.recent
	if i := slices.Index(r, sh); i >= 0 {
		r = slices.Delete(r, i, i+1)
	}
	r = slices.Insert(r, 0, sh)
	for len(r) > PremadeShapes {
		old := r[len(r)-1]
		r = r[:len(r)-1]
		if b := s.pool.ready[old]; b != nil {
			delete(s.pool.ready, old)
			s.spawn(old.digest, func() { s.pool.destroy(b) })
		}
	}
	s.pool.recent = r
}

// spawn runs f, which uses image digest, in the background; dropPremade
// and dropPremadeOf wait for it. s.mu is held.
func (s *Service) spawn(digest string, f func()) {
	done := make(chan struct{})
	s.pool.work[done] = digest
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.pool.work, done)
			s.mu.Unlock()
			close(done)
		}()
		f()
	}()
}

// refill has a sandbox of p's shape made in the background unless one is
// ready or being made, the shape is no longer among the recent ones, or
// its image is being removed. p was planned before the run: its image may
// have been removed since. Registered as work of the image, the refill is
// ordered with the image's removal (HoldImage): begun before, it is waited
// for and its sandbox not kept; begun during, it is abandoned here; begun
// after, it finds the image gone and is abandoned.
func (s *Service) refill(p *runPlan) {
	sh := p.shape()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool.init == "" || s.pool.closed || s.pool.ready[sh] != nil || s.pool.making[sh] != nil || !slices.Contains(s.pool.recent, sh) ||
		s.imgRemoval == sh.digest {
		return
	}
	made := make(chan struct{})
	s.pool.making[sh] = made
	gen, init := s.pool.gen, s.pool.init
	s.spawn(sh.digest, func() {
		var b *premade
		_, err := s.imgs.Get(context.Background(), sh.digest)
		if err == nil {
			b, err = s.pool.make(sh, p, init)
		}
		s.mu.Lock()
		delete(s.pool.making, sh)
		keep := err == nil && !s.pool.closed && gen == s.pool.gen && s.pool.ready[sh] == nil && slices.Contains(s.pool.recent, sh) &&
			s.imgRemoval != sh.digest
		if keep {
			s.pool.ready[sh] = b
		}
		close(made)
		s.mu.Unlock()
		switch {
		case isNotFound(err):
			s.log.Debug("premade container not made: the image was removed", "image", sh.digest)
		case err != nil:
			s.log.Warn("premade container", "image", sh.digest, "network", sh.mode, "err", err)
		case !keep:
			s.pool.destroy(b)
		}
	})
}

// makePremade makes a sandbox of shape sh as p's container would be
// made, but with shoal-init (at host path init) waiting as its process.
// On an error it leaves nothing behind.
func (s *Service) makePremade(sh shape, p *runPlan, init string) (b *premade, err error) {
	t0 := time.Now()
	b = &premade{id: newID(12), shape: sh}
	s.mu.Lock()
	s.hidden[b.id] = true
	s.mu.Unlock()
	ctx := context.Background()
	var inR, outW, errW *os.File
	defer func() {
		for _, f := range []*os.File{inR, outW, errW} {
			if f != nil {
				f.Close()
			}
		}
		if err != nil {
			s.destroyPremade(b)
			err = fmt.Errorf("container %s: %w", b.id, err)
		}
	}()
	if b.att, err = s.net.Acquire(ctx, b.id, sh.mode); err != nil {
		return b, fmt.Errorf("network %s: %w", sh.mode, err)
	}
	if inR, b.stdin, err = os.Pipe(); err != nil {
		return b, err
	}
	if b.outR, outW, err = os.Pipe(); err != nil {
		return b, err
	}
	if b.errR, errW, err = os.Pipe(); err != nil {
		return b, err
	}
	spec := p.spec
	spec.ID, spec.Hostname, spec.Ephemeral, spec.NetNSPath = b.id, b.id, true, b.att.NSPath
	spec.Args, spec.Env, spec.Cwd = []string{stub.Path}, p.imageEnv, "/"
	spec.Mounts = append(slices.Clone(p.spec.Mounts), runtime.Mount{Source: init, Destination: stub.Path, ReadOnly: true,
		Options: []string{"nosuid", "nodev"}})
	spec.Labels = maps.Clone(p.spec.Labels)
	delete(spec.Labels, labels.Command)
	spec.Stdin, spec.Stdout, spec.Stderr = inR, outW, errW
	if _, err := s.rt.Run(ctx, spec); err != nil {
		return b, fmt.Errorf("start: %w", err)
	}
	s.log.Debug("premade container made", "container", b.id, "network", sh.mode, "took", time.Since(t0).String())
	return b, nil
}

// destroyPremade removes premade sandbox b, or what was made of it.
func (s *Service) destroyPremade(b *premade) {
	for _, f := range []*os.File{b.stdin, b.outR, b.errR} {
		if f != nil {
			f.Close() // shoal-init, reading no command, exits
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.rt.Delete(ctx, b.id); err != nil && !isNotFound(err) {
		s.log.Error("remove premade container", "id", b.id, "err", err)
	}
	if b.att != nil {
		s.releaseNet(b.att)
	}
	s.mu.Lock()
	delete(s.hidden, b.id)
	s.mu.Unlock()
}

// dropPremade removes the premade sandboxes, ready or being made, and
// waits until they are gone.
func (s *Service) dropPremade() {
	s.mu.Lock()
	ready := s.pool.ready
	s.pool.ready = map[shape]*premade{}
	s.pool.gen++
	var work []chan struct{}
	for c := range s.pool.work {
		work = append(work, c)
	}
	s.mu.Unlock()
	for _, b := range ready {
		s.pool.destroy(b)
	}
	for _, c := range work {
		<-c
	}
}

// dropPremadeOf removes the premade sandboxes of image digest and waits
// for the work using it (sandboxes being made or removed) to end. Those
// being made are not kept while HoldImage holds the image.
func (s *Service) dropPremadeOf(digest string) {
	s.mu.Lock()
	var drop []*premade
	for sh, b := range s.pool.ready {
		if sh.digest == digest {
			delete(s.pool.ready, sh)
			drop = append(drop, b)
		}
	}
	var work []chan struct{}
	for c, d := range s.pool.work {
		if d == digest {
			work = append(work, c)
		}
	}
	s.mu.Unlock()
	for _, b := range drop {
		s.pool.destroy(b)
	}
	for _, c := range work {
		<-c
	}
}

// closePremade stops making sandboxes ahead and removes those made.
func (s *Service) closePremade() {
	s.mu.Lock()
	s.pool.closed = true
	s.mu.Unlock()
	s.dropPremade()
}

func isNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }
