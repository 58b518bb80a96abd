// Package containers is the one-off container service behind `shoal run`,
// `shoal ps` and `shoal rm`: it plans a container from the image and the
// request (limits, network, security defaults), starts it on the runtime in
// a namespace from the network pool, streams its output and waits for its
// exit (with --timeout and --rm), lists and removes containers, and tells
// which images running containers use. The daemon builds one and hands it
// to the API.
package containers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/group"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

const defaultPids = 1024

// Service runs one-off containers for `shoal run`.
type Service struct {
	rt   *runtime.Runtime
	imgs *image.Store
	net  *network.Manager
	log  *slog.Logger

	mu       sync.Mutex
	attached map[string]*network.Attachment // container id → its namespace
	removing map[string]bool                // --rm containers being removed
	starting map[string]int                 // image digest → containers being started from it
	// pending counts the background releases and removals. A run whose
	// client's server closed at the daemon's stop may still add one while
	// Drain waits: a group, not a sync.WaitGroup.
	pending group.Group

	// stopping is set when the daemon shuts down: a run whose client
	// connection closes then leaves its container running (the next daemon
	// adopts it) instead of killing it.
	stopping atomic.Bool

	started  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New returns the service of rt, with its images, network pool, log and
// metrics (registered with reg).
func New(rt *runtime.Runtime, imgs *image.Store, nm *network.Manager, log *slog.Logger, reg *prometheus.Registry) *Service {
	s := &Service{rt: rt, imgs: imgs, net: nm, log: log, attached: map[string]*network.Attachment{}, removing: map[string]bool{}, starting: map[string]int{}}
	s.started = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_containers_started_total", Help: "Containers started, by network mode.",
	}, []string{"network"})
	s.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shoal_container_phase_seconds",
		Help:    "Time spent in each phase of a one-off container: start (image to running), run (running to exit), delete.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"phase"})
	reg.MustRegister(s.started, s.duration)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shoal_containers", Help: "Containers known to the runtime.",
	}, func() float64 {
		cs, _ := rt.List(context.Background())
		return float64(len(cs))
	}))
	return s
}

// Run starts a container for req, streams its output through attach and
// waits for it to exit.
func (s *Service) Run(ctx context.Context, req types.RunRequest, attach func() (io.Writer, io.Writer)) (types.Exit, error) {
	t0 := time.Now()
	p, err := s.plan(ctx, req)
	if err != nil {
		return types.Exit{}, err
	}
	started := false
	defer func() {
		if !started {
			s.unpin(p.digest)
		}
	}()
	id := newID(12)
	p.spec.ID, p.spec.Hostname = id, id
	// A --rm container's client is gone when the daemon is, so it is not
	// recorded: a restarted daemon removes it rather than adopting it.
	p.spec.Ephemeral = p.remove
	att, err := s.net.Acquire(ctx, id, p.mode)
	if err != nil {
		return types.Exit{}, fmt.Errorf("container %s: network %s: %w", id, p.mode, err)
	}
	p.spec.NetNSPath = att.NSPath
	outR, outW, err := os.Pipe()
	if err != nil {
		s.releaseNet(att)
		return types.Exit{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		s.releaseNet(att)
		return types.Exit{}, err
	}
	p.spec.Stdout, p.spec.Stderr = outW, errW
	_, err = s.rt.Run(ctx, p.spec)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		s.rt.Delete(context.Background(), id)
		s.releaseNet(att)
		return types.Exit{}, fmt.Errorf("container %s: start: %w", id, err)
	}
	s.trackNet(id, att)
	s.unpin(p.digest) // the runtime now lists the container
	started = true
	s.started.WithLabelValues(string(p.mode)).Inc()
	s.duration.WithLabelValues("start").Observe(time.Since(t0).Seconds())
	t1 := time.Now()
	stdout, stderr := attach()
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); io.Copy(stdout, outR); outR.Close() }()
	go func() { defer copies.Done(); io.Copy(stderr, errR); errR.Close() }()

	exit, left := s.wait(ctx, id, p.timeout)
	if left {
		// The daemon is stopping: the container keeps running for the next
		// daemon, its output has nowhere to go.
		outR.Close()
		errR.Close()
		return exit, nil
	}
	copies.Wait()
	s.duration.WithLabelValues("run").Observe(time.Since(t1).Seconds())
	// Tearing down a bridge attachment takes tens of milliseconds of CNI and
	// iptables work; the caller does not wait for it.
	s.pending.Add(1)
	go func() { defer s.pending.Done(); s.releaseNetOf(id) }()
	if p.remove {
		// The container has exited and is no longer listed; its mount,
		// cgroups and bundle are removed after the answer is sent. A daemon
		// that dies before that finishes removes them at its next start
		// (the container was never recorded, so it is an orphan).
		s.mu.Lock()
		s.removing[id] = true
		s.mu.Unlock()
		s.pending.Add(1)
		go func() {
			defer s.pending.Done()
			t2 := time.Now()
			if err := s.rt.Delete(context.Background(), id); err != nil {
				s.log.Error("remove container", "id", id, "err", err)
			}
			s.duration.WithLabelValues("delete").Observe(time.Since(t2).Seconds())
			s.mu.Lock()
			delete(s.removing, id)
			s.mu.Unlock()
		}()
	}
	return exit, nil
}

// wait waits for the container to exit, killing it when the timeout passes
// or the client goes away. left is true when the daemon is stopping and the
// container was left running.
func (s *Service) wait(ctx context.Context, id string, timeout time.Duration) (exit types.Exit, left bool) {
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		st  runtime.ExitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := s.rt.Wait(wctx, id)
		done <- result{st, err}
	}()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	timedOut := false
	for {
		select {
		case r := <-done:
			e := types.Exit{ID: id, Code: r.st.Code, OOMKilled: r.st.OOMKilled, TimedOut: timedOut}
			if r.st.Signal != 0 {
				e.Signal = r.st.Signal.String()
			}
			if r.err != nil {
				e.Error = r.err.Error()
				if e.Code == 0 {
					e.Code = 125
				}
			}
			return e, false
		case <-timer:
			timedOut = true
			timer = nil
			s.rt.Signal(id, syscall.SIGKILL)
		case <-ctx.Done():
			if s.stopping.Load() {
				return types.Exit{ID: id, Code: 125, Error: "the daemon is stopping; the container keeps running"}, true
			}
			s.rt.Signal(id, syscall.SIGKILL)
			ctx = context.Background()
		}
	}
}

// Drain waits for the background releases and removals to finish.
func (s *Service) Drain() { s.pending.Wait() }

// Stopping marks the daemon as shutting down: a run whose client
// connection closes from now on leaves its container running for the next
// daemon to adopt, instead of killing it.
func (s *Service) Stopping() { s.stopping.Store(true) }

func (s *Service) trackNet(id string, a *network.Attachment) {
	s.mu.Lock()
	s.attached[id] = a
	s.mu.Unlock()
}

func (s *Service) releaseNetOf(id string) {
	s.mu.Lock()
	a := s.attached[id]
	delete(s.attached, id)
	s.mu.Unlock()
	if a != nil {
		s.releaseNet(a)
	}
}

func (s *Service) releaseNet(a *network.Attachment) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.net.Release(ctx, a); err != nil {
		s.log.Error("release network namespace", "container", a.ID, "err", err)
	}
}

// WatchAdopted takes over containers a previous daemon started: their
// namespaces are released when they exit.
func (s *Service) WatchAdopted(cs []*runtime.Container) {
	for _, c := range cs {
		if c.NetNSPath == "" {
			continue
		}
		a := &network.Attachment{ID: c.ID, NSPath: c.NetNSPath}
		s.trackNet(c.ID, a)
		go func(id string) {
			s.rt.Wait(context.Background(), id)
			s.releaseNetOf(id)
		}(c.ID)
	}
}

// List returns the containers the runtime knows, newest first, leaving out
// --rm containers being removed.
func (s *Service) List(ctx context.Context) ([]types.Container, error) {
	cs, err := s.rt.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]types.Container, 0, len(cs))
	s.mu.Lock()
	removing := make(map[string]bool, len(s.removing))
	for id := range s.removing {
		removing[id] = true
	}
	s.mu.Unlock()
	for _, c := range cs {
		if removing[c.ID] {
			continue
		}
		a := types.Container{ID: c.ID, Status: c.Status, Pid: c.Pid, Created: c.Created, Labels: c.Labels, Image: c.Labels[labels.Image]}
		json.Unmarshal([]byte(c.Labels[labels.Command]), &a.Command)
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

func (s *Service) unpin(digest string) {
	if digest == "" {
		return
	}
	s.mu.Lock()
	if s.starting[digest]--; s.starting[digest] <= 0 {
		delete(s.starting, digest)
	}
	s.mu.Unlock()
}

// ImageUsers maps each image digest in use to one container using it
// ("starting" for a container not yet created).
func (s *Service) ImageUsers(ctx context.Context) (map[string]string, error) {
	cs, err := s.rt.List(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	s.mu.Lock()
	for d := range s.starting {
		m[d] = "starting"
	}
	s.mu.Unlock()
	for _, c := range cs {
		if d := c.Labels[labels.Digest]; d != "" {
			m[d] = c.ID
		}
	}
	return m, nil
}

// Remove deletes container id with its mounts, cgroups and network.
func (s *Service) Remove(ctx context.Context, id string) error {
	s.mu.Lock()
	removing := s.removing[id]
	s.mu.Unlock()
	if removing {
		return fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	if err := s.rt.Delete(ctx, id); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
		}
		// The container may still run: keep its namespace.
		return err
	}
	s.releaseNetOf(id)
	return nil
}

// newID returns n random hex digits, a container's id.
func newID(n int) string {
	b := make([]byte, (n+1)/2)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
