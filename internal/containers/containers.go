// Package containers is the one-off container service behind `shoal run`,
// `shoal ps` and `shoal rm`: it plans a container from the image and the
// request (limits, network, security defaults), starts it on the runtime in
// a namespace from the network pool, streams its output and waits for its
// exit (with --timeout and --rm), lists and removes containers, and tells
// which images running containers use. The daemon builds one and hands it
// to the API.
package containers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
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
	"github.com/shoal-run/shoal/internal/sandbox/stub"
)

const defaultPids = 1024

// Service runs one-off containers for `shoal run`.
type Service struct {
	rt   containerRuntime
	imgs imageStore
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
	pool    premadePool
	hidden  map[string]bool  // premade containers no run has taken
	taken   map[string]taken // premade containers runs took, until removed
	// imgRemoval is the digest of the image HoldImage holds for its
	// removal, if any; removals take holdMu in turn.
	imgRemoval string
	holdMu     sync.Mutex

	// stopping is set when the daemon shuts down: a run whose client
	// connection closes then leaves its container running (the next daemon
	// adopts it) instead of killing it.
	stopping atomic.Bool

	started  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// containerRuntime is what the service uses of the runtime.
type containerRuntime interface {
	Run(ctx context.Context, spec runtime.Spec) (*runtime.Container, error)
	Delete(ctx context.Context, id string) error
	Wait(ctx context.Context, id string) (runtime.ExitStatus, error)
	Signal(id string, sig syscall.Signal) error
	List(ctx context.Context) ([]*runtime.Container, error)
}

// imageStore is what the service uses of the image store.
type imageStore interface {
	Get(ctx context.Context, ref string) (image.Image, error)
}

// New returns the service of rt, with its images, network pool, log and
// metrics (registered with reg).
func New(rt *runtime.Runtime, imgs *image.Store, nm *network.Manager, log *slog.Logger, reg *prometheus.Registry) *Service {
	s := &Service{rt: rt, imgs: imgs, net: nm, log: log, attached: map[string]*network.Attachment{}, removing: map[string]bool{}, starting: map[string]int{},
		hidden: map[string]bool{}, taken: map[string]taken{}}
	s.pool.ready, s.pool.making, s.pool.work = map[shape]*premade{}, map[shape]chan struct{}{}, map[chan struct{}]string{}
	s.pool.make, s.pool.destroy = s.makePremade, s.destroyPremade
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
// waits for it to exit. A --rm run takes a container made ahead for its
// shape when there is one (see premadePool).
func (s *Service) Run(ctx context.Context, req types.RunRequest, attach func() (io.Writer, io.Writer)) (types.Exit, error) {
	t0 := time.Now()
	p, err := s.plan(ctx, req)
	if err != nil {
		return types.Exit{}, err
	}
	if p.remove {
		// Made again for the next run of its shape, once this one has
		// taken it (or found none).
		defer s.refill(p)
		if b := s.takePremade(ctx, p); b != nil {
			if exit, err, ok := s.runPremade(ctx, p, b, attach, t0); ok {
				return exit, err
			}
		}
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
	return s.finish(p, id, t1, stdout, stderr, &held{r: outR}, &held{r: errR}, func() (types.Exit, bool) {
		return s.wait(ctx, id, p.timeout)
	}), nil
}

// runPremade runs p's command in premade sandbox b: its shoal-init reads
// the command and execs it. Output is held back from attach until the
// command writes some or ends, so that a command shoal-init cannot run is
// an error as on the ordinary path. ok is false if b's shoal-init was
// gone (b is then removed and the run takes the ordinary path).
func (s *Service) runPremade(ctx context.Context, p *runPlan, b *premade, attach func() (io.Writer, io.Writer), t0 time.Time) (_ types.Exit, _ error, ok bool) {
	id := b.id
	cmd := stub.Encode(stub.Cmd{Args: p.spec.Args, Env: p.reqEnv, Cwd: p.spec.Cwd})
	_, err := b.stdin.Write(cmd)
	b.stdin.Close()
	b.stdin = nil
	if err != nil {
		s.log.Warn("premade container gone", "container", id, "err", err)
		s.mu.Lock()
		delete(s.taken, id)
		s.mu.Unlock()
		s.destroyPremade(b)
		return types.Exit{}, nil, false
	}
	s.trackNet(id, b.att)
	s.unpin(p.digest) // the runtime lists the container
	s.started.WithLabelValues(string(p.mode)).Inc()
	s.duration.WithLabelValues("start").Observe(time.Since(t0).Seconds())
	t1 := time.Now()
	done := make(chan waited, 1)
	go func() {
		exit, left := s.wait(ctx, id, p.timeout)
		done <- waited{exit, left}
	}()
	out, errh := hold(b.outR), hold(b.errR)
	w, failed := gate(out, errh, done)
	if failed != "" {
		out.discard()
		errh.discard()
		s.removeAfter(p, id)
		return types.Exit{}, fmt.Errorf("container %s: start: %s", id, failed), true
	}
	stdout, stderr := attach()
	return s.finish(p, id, t1, stdout, stderr, out, errh, func() (types.Exit, bool) {
		if w == nil {
			r := <-done
			w = &r
		}
		return w.exit, w.left
	}), nil, true
}

// waited is how a container's wait ended.
type waited struct {
	exit types.Exit
	left bool
}

// gate waits until the command given to a premade container's shoal-init
// surely runs: it wrote to stdout, or to stderr other than shoal-init's
// line saying it cannot run the command, or it ended (then w is how, read
// from done). failed is shoal-init's reason (`cannot run "NAME": WHY`)
// if it could not run the command: it then exited 127 after that line.
func gate(out, errh *held, done <-chan waited) (w *waited, failed string) {
	outFirst, errFirst := out.done, errh.done
	for {
		select {
		case <-outFirst:
			outFirst = nil
			if len(out.first) > 0 {
				return nil, ""
			}
			// Closed: the command ends.
		case <-errFirst:
			errFirst = nil
			if len(errh.first) > 0 && !bytes.HasPrefix(errh.first, []byte(stub.Failed)) {
				return nil, ""
			}
			// The command ends, or it may not have run.
		case r := <-done:
			if r.left {
				return &r, ""
			}
			<-errh.done
			if r.exit.Code == 127 && bytes.HasPrefix(errh.first, []byte(stub.Failed)) {
				line, _, _ := bytes.Cut(errh.first, []byte("\n"))
				return &r, string(bytes.TrimPrefix(line, []byte("shoal-init: ")))
			}
			return &r, ""
		}
	}
}

// held is a container's stdout or stderr with what was first read of it.
type held struct {
	r     *os.File
	first []byte
	err   error
	done  chan struct{} // closed once first is read; nil: nothing read ahead
}

// hold reads the first output of r in the background.
func hold(r *os.File) *held {
	h := &held{r: r, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		buf := make([]byte, 32<<10)
		n, err := r.Read(buf)
		h.first, h.err = buf[:n], err
	}()
	return h
}

// copyTo writes what h holds and the rest of its output to w, then closes it.
func (h *held) copyTo(w io.Writer) {
	if h.done != nil {
		<-h.done
		w.Write(h.first)
		if h.err != nil {
			h.r.Close()
			return
		}
	}
	io.Copy(w, h.r)
	h.r.Close()
}

// discard closes h once its first read has ended.
func (h *held) discard() {
	h.r.Close()
	if h.done != nil {
		<-h.done
	}
}

// finish streams a started container's output (out, errh) to stdout and
// stderr while it waits for its exit; the network is released and a --rm
// container removed in the background. If wait says the container was
// left (the daemon is stopping), its output is dropped.
func (s *Service) finish(p *runPlan, id string, t1 time.Time, stdout, stderr io.Writer, out, errh *held, wait func() (types.Exit, bool)) types.Exit {
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); out.copyTo(stdout) }()
	go func() { defer copies.Done(); errh.copyTo(stderr) }()
	exit, left := wait()
	if left {
		// The daemon is stopping: the container keeps running for the next
		// daemon, its output has nowhere to go.
		out.r.Close()
		errh.r.Close()
		return exit
	}
	copies.Wait()
	s.duration.WithLabelValues("run").Observe(time.Since(t1).Seconds())
	s.removeAfter(p, id)
	return exit
}

// removeAfter releases the network of container id, which has exited, and
// removes a --rm one, in the background.
func (s *Service) removeAfter(p *runPlan, id string) {
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
			delete(s.taken, id)
			s.mu.Unlock()
		}()
	}
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

// Drain removes the premade containers, stops making them and waits for
// the background releases and removals to finish.
func (s *Service) Drain() {
	s.closePremade()
	s.pending.Wait()
}

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
// --rm containers being removed and premade ones no run has taken.
func (s *Service) List(ctx context.Context) ([]types.Container, error) {
	cs, err := s.rt.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]types.Container, 0, len(cs))
	s.mu.Lock()
	skip := make(map[string]bool, len(s.removing)+len(s.hidden))
	for id := range s.removing {
		skip[id] = true
	}
	for id := range s.hidden {
		skip[id] = true
	}
	taken := make(map[string]taken, len(s.taken))
	for id, t := range s.taken {
		taken[id] = t
	}
	s.mu.Unlock()
	for _, c := range cs {
		if skip[c.ID] {
			continue
		}
		if t, ok := taken[c.ID]; ok {
			c.Labels, c.Created = t.labels, t.created
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

// HoldImage begins the removal of image digest. It removes the image's
// premade containers, waits for those being made, and tells whether a
// container still uses the image: user is its id ("starting" for one not
// yet created). If none does, the caller removes the image and then calls
// release; until then no premade container of the image is made (a refill
// begun later finds the image gone and is abandoned). Removals are held
// one at a time.
func (s *Service) HoldImage(ctx context.Context, digest string) (user string, release func(), err error) {
	s.holdMu.Lock()
	s.mu.Lock()
	s.imgRemoval = digest
	s.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			s.imgRemoval = ""
			s.mu.Unlock()
			s.holdMu.Unlock()
		})
	}
	s.dropPremadeOf(digest)
	cs, err := s.rt.List(ctx)
	if err != nil {
		release()
		return "", nil, err
	}
	s.mu.Lock()
	if s.starting[digest] > 0 {
		user = "starting"
	}
	hidden := maps.Clone(s.hidden)
	s.mu.Unlock()
	for _, c := range cs {
		if user == "" && !hidden[c.ID] && c.Labels[labels.Digest] == digest {
			user = c.ID
		}
	}
	if user != "" {
		release()
		return user, nil, nil
	}
	return "", release, nil
}

// Remove deletes container id with its mounts, cgroups and network.
func (s *Service) Remove(ctx context.Context, id string) error {
	s.mu.Lock()
	removing := s.removing[id] || s.hidden[id]
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
