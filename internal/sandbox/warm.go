package sandbox

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

// warmKey is the shape of job a warm sandbox was made for: the first
// step's container spec is the same for every job of one shape but for the
// command, environment, directory and stdin, which its stub reads when the
// job takes it.
type warmKey struct {
	image, digest string
	limits        jobs.Limits
	work          int64
	hostID        uint32 // root's host uid in the tenant's user namespace; 0: none
	// tenant, in a reusable sandbox, whose jobs alone it serves: without
	// user namespaces every tenant's sandboxes have the same host uid.
	tenant string
}

// warmBox is a sandbox created ahead of its job: namespace from the pool,
// work tmpfs (empty), cgroups, and an init waiting to exec the stub.
type warmBox struct {
	id         string
	shape      warmKey
	work       string
	att        *network.Attachment
	stdin      *os.File // write end: the stub's command, then the step's stdin
	outR, errR *os.File
	z          *box // set in a reusable sandbox (Sandbox.Reuse), whose process is Serve
}

// warmPool keeps up to Sandbox.Warm sandboxes created for one shape of
// job; a job of another shape takes the ordinary path, and two such jobs
// in a row make theirs the shape kept (so jobs of two shapes interleaved
// do not make and drop sandboxes at every job). Each warm sandbox serves
// one job at a time, a reusable one (Sandbox.Reuse) up to boxRuns in
// turn: the first step's cgroups (the sandbox's, or in a reusable one the
// step's own below it), and so its CPU time, peak memory and OOM count,
// are its own.
type warmPool struct {
	once, closing sync.Once
	mu            sync.Mutex
	key           warmKey // the shape kept; zero: none (idle)
	next          warmKey // the shape of the last job that missed, if the one before did not
	img           image.Image
	ready         []*warmBox
	busy          int            // reusable sandboxes out with jobs, counted against Warm
	releasing     int            // reusable sandboxes being emptied (see release)
	releases      sync.WaitGroup // the goroutines emptying them
	released      chan struct{}  // closed when one has been (then made anew)
	wake          chan struct{}  // a job took or missed one
	stop          chan struct{}
	done          chan struct{}
	// hits and misses count the jobs that found a warm sandbox of their
	// shape and those that did not.
	hits, misses atomic.Uint64
	// reused counts the jobs that ran in a reusable sandbox an earlier job
	// ran in.
	reused atomic.Uint64
}

// WarmStats is how many jobs found a warm sandbox of their shape (hits),
// how many did not (misses), how many of the hits ran in a sandbox an
// earlier job had used (reused) and how many sandboxes are ready now.
type WarmStats struct {
	Hits, Misses, Reused uint64
	Ready                int
}

// WarmStats says how the warm sandboxes served jobs so far.
func (s *Sandbox) WarmStats() WarmStats {
	p := &s.pool
	p.mu.Lock()
	ready := len(p.ready)
	p.mu.Unlock()
	return WarmStats{Hits: p.hits.Load(), Misses: p.misses.Load(), Reused: p.reused.Load(), Ready: ready}
}

// releaseWait bounds how long a job waits for a used sandbox of its shape
// being emptied when only unused ones are ready (see take).
const releaseWait = 50 * time.Millisecond

// take returns a warm sandbox of key's shape, or nil; the second job in a
// row of a shape the pool does not keep makes it the one kept. It takes
// the last one in of the ready sandboxes that served a job before (its
// pages are the likeliest still cached), else the last one in. If none is
// ready but one is being emptied (about a millisecond), it waits for that
// one, at most releaseWait: jobs in a row of a new shape so reuse one
// sandbox rather than each take the ordinary path while the last is
// emptied.
func (s *Sandbox) take(ctx context.Context, key warmKey, img image.Image) *warmBox {
	p := &s.pool
	p.once.Do(func() {
		p.wake, p.stop, p.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		p.released = make(chan struct{})
		go s.fill()
	})
	p.mu.Lock()
	var b *warmBox
	switch {
	case p.key == key:
		var wait clock.Timer
		for b == nil {
			if b = p.takeReady(true); b == nil {
				b = p.takeReady(false)
			}
			if b != nil || p.releasing == 0 || p.key != key {
				break
			}
			if wait == nil {
				wait = s.clock().NewTimer(releaseWait)
				defer wait.Stop()
			}
			released := p.released
			p.mu.Unlock()
			select {
			case <-released:
				p.mu.Lock()
				continue
			case <-wait.C():
			case <-ctx.Done():
			}
			p.mu.Lock()
			break
		}
		p.next = warmKey{}
	case p.next == key:
		p.key, p.img = key, img
	default:
		p.next = key
	}
	p.mu.Unlock()
	if b != nil {
		p.hits.Add(1)
		if b.z != nil && b.z.runs > 0 {
			p.reused.Add(1)
		}
	} else {
		p.misses.Add(1)
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return b
}

// takeReady removes from the ready ones and returns the last one in, or,
// if used, the last one in that served a job before; nil if none. p.mu is
// held.
func (p *warmPool) takeReady(used bool) *warmBox {
	for i := len(p.ready) - 1; i >= 0; i-- {
		b := p.ready[i]
		if used && (b.z == nil || b.z.runs == 0) {
			continue
		}
		p.ready = append(p.ready[:i], p.ready[i+1:]...)
		if b.z != nil {
			p.busy++
		}
		return b
	}
	return nil
}

// WarmIdle is how long warm sandboxes are kept after the last job took,
// missed or gave back one (and none is out with a job): an idle host keeps
// no sandbox processes, cgroups or namespaces.
const WarmIdle = 2 * time.Second

// fill keeps the pool at Warm sandboxes of the current shape, dropping
// those of another, until Close; after WarmIdle without a job it drops
// them all until the next job. It makes one sandbox at a time: two at once
// (one per CPU) measured no faster on 2 cores, the second `runc create`
// taking CPU from the jobs running.
func (s *Sandbox) fill() {
	p := &s.pool
	defer close(p.done)
	idle := s.clock().NewTimer(WarmIdle)
	defer idle.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-idle.C():
			// Dropped; the next job of the shape makes it kept again. Not
			// while a job has a reusable sandbox: it is not idle.
			p.mu.Lock()
			if p.busy > 0 {
				p.mu.Unlock()
				idle.Reset(WarmIdle)
				continue
			}
			p.next, p.key, p.img = p.key, warmKey{}, image.Image{}
			n := len(p.ready)
			p.mu.Unlock()
			if n > 0 {
				s.log().Debug("warm job sandboxes dropped: no job for a while", "sandboxes", n, "idle", WarmIdle)
			}
		case <-p.wake:
			idle.Reset(WarmIdle)
		}
		for {
			p.mu.Lock()
			var stale []*warmBox
			kept := p.ready[:0]
			for _, b := range p.ready {
				if b.shape != p.key {
					stale = append(stale, b)
				} else {
					kept = append(kept, b)
				}
			}
			p.ready = kept
			key, img, n := p.key, p.img, len(p.ready)+p.busy
			p.mu.Unlock()
			for _, b := range stale {
				s.destroyWarm(b)
			}
			if n >= s.Warm || key.digest == "" || stopped(p.stop) {
				break
			}
			b, err := s.makeWarm(key, img)
			if err != nil {
				s.log().Warn("warm job sandbox", "err", err)
				break // tried again at the next job
			}
			p.mu.Lock()
			p.ready = append(p.ready, b)
			p.mu.Unlock()
		}
	}
}

func stopped(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Close removes the warm sandboxes and stops making them, once those
// being emptied are back; those out with a job are removed when it gives
// them back. The caller has no Run starting meanwhile (the Manager closes
// first, waiting for its jobs). Closing again does nothing.
func (s *Sandbox) Close() {
	p := &s.pool
	p.once.Do(func() { p.done = make(chan struct{}); close(p.done) })
	p.closing.Do(func() {
		if p.stop != nil {
			close(p.stop)
		}
	})
	<-p.done
	p.releases.Wait()
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, b := range ready {
		s.destroyWarm(b)
	}
}

// keyOf is the shape of job j whose first step runs on img, in user
// namespace ns (nil: none); a reusable sandbox (reuse) takes any limits of
// the first step but the size of /tmp, and one tenant's jobs only.
func keyOf(p *jobs.Plan, img image.Image, ns *runtime.UserNS, reuse bool) warmKey {
	k := warmKey{image: p.Req.Image, digest: img.Digest, limits: p.Steps[0].Limits, work: p.Work}
	if reuse {
		k.limits = jobs.Limits{TmpBytes: k.limits.TmpBytes}
		k.tenant = p.Tenant
	}
	if ns != nil {
		k.hostID = ns.HostID
	}
	return k
}

// release takes back reusable sandbox b from the job that had it, off
// the job's slot: the job (and the next one in the queue) need not wait
// while it is emptied and its next step made ready (giveBack), the pool
// counting it as busy meanwhile. Close waits for those in hand.
func (s *Sandbox) release(b *warmBox) {
	p := &s.pool
	p.mu.Lock()
	p.releasing++
	p.mu.Unlock()
	p.releases.Add(1)
	go func() {
		defer p.releases.Done()
		s.giveBack(b)
	}()
}

// giveBack empties reusable sandbox b (see wipe.Kept) and readies its next step
// (see stepPrep): it then waits for the next job of its shape, unless a
// step or Serve failed, a job left a process or changed Serve (see check),
// it cannot be emptied, its network namespace is not empty
// (network.CheckEmptyOf), its next step cannot be made ready, it served
// boxRuns jobs, its shape is no longer kept or enough are ready; then it
// is removed.
func (s *Sandbox) giveBack(b *warmBox) {
	z := b.z
	z.runs++
	p := &s.pool
	err := z.removeSpent()
	if err == nil {
		err = z.check()
	}
	if err == nil && b.att != nil {
		// What a job's sockets leave, such as a connection in TIME_WAIT
		// on a port the next job would listen on, cannot be emptied.
		if err = network.CheckEmptyOf(z.keep.Proc()); err != nil {
			err = fmt.Errorf("its network namespace: %w", err)
		}
	}
	if err == nil {
		err = z.keep.Wipe()
	}
	// Still counted as busy while its next step is made ready, so the
	// pool does not fill its place meanwhile.
	p.mu.Lock()
	back := err == nil && z.runs < boxRuns && b.shape == p.key && len(p.ready)+p.busy <= s.Warm && !stopped(p.stop)
	p.mu.Unlock()
	if back && z.next == nil { // (a job cancelled before its first step left it)
		err = z.prepare()
	}
	p.mu.Lock()
	p.busy--
	back = back && err == nil && b.shape == p.key && !stopped(p.stop)
	if back {
		p.ready = append(p.ready, b)
	}
	p.releasing--
	close(p.released)
	p.released = make(chan struct{})
	p.mu.Unlock()
	if err != nil {
		s.log().Warn("reusable job sandbox dropped", "sandbox", b.id, "err", err)
	}
	if !back {
		s.cleanWarm(b, true)
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}
