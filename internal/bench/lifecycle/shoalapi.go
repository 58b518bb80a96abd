package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/bench/kit"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

// apiEnv is shoal's runtime, image store and network manager, in this
// process, under one bench folder.
type apiEnv struct {
	dir    string
	images *image.Store
	layers []string
	net    *network.Manager
	rts    []*runtime.Runtime
}

// newAPIEnv builds the benchmark image from rootfs into a fresh image store
// and starts a network manager with its pool.
func newAPIEnv(ctx context.Context, dir, rootfs string) (_ *apiEnv, retErr error) {
	e := &apiEnv{dir: dir}
	defer func() {
		if retErr != nil {
			e.close(context.WithoutCancel(ctx))
		}
	}()
	var err error
	if e.images, err = image.Open(filepath.Join(dir, "images"), image.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		return nil, fmt.Errorf("bench image store: %w", err)
	}
	img, err := e.images.Build(ctx, rootfs, image.BuildOptions{Tag: kit.BenchImage})
	if err != nil {
		return nil, fmt.Errorf("bench image %q: %w", kit.BenchImage, err)
	}
	e.layers = img.Layers
	e.net, err = network.New(ctx, network.Options{
		StateDir:   filepath.Join(dir, "netns"),
		CNIConfDir: filepath.Join(dir, "cni"),
		Bridge:     kit.BenchBridge,
		Subnet:     kit.BenchSubnet,
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, fmt.Errorf("bench network: %w", err)
	}
	return e, nil
}

// subject returns a subject that runs /bin/true through its own Runtime of
// the named OCI runtime ("runc" or "crun"), whose phase log it keeps.
func (e *apiEnv) subject(ctx context.Context, key, ociRuntime string, mode network.Mode, split bool) (*apiSubject, error) {
	if ociRuntime == "crun" {
		if err := runtime.CrunUsable(ctx); err != nil {
			return nil, err
		}
	}
	log := &phaseLog{m: map[string][]time.Duration{}}
	rt, err := runtime.New(ctx, runtime.Options{
		Root:         filepath.Join(e.dir, key, "containers"),
		RuntimeRoot:  filepath.Join(e.dir, key, "state"),
		Runtime:      ociRuntime,
		CgroupParent: kit.BenchCgroupParent,
		Logger:       slog.New(log),
	})
	if err != nil {
		return nil, err
	}
	e.rts = append(e.rts, rt)
	return &apiSubject{env: e, rt: rt, log: log, mode: mode, split: split,
		prefix: fmt.Sprintf("shoal-bench-%s-%d-", key, os.Getpid())}, nil
}

// close deletes every container the runtimes still know, closes the network
// manager (which destroys its pool) and the image store.
func (e *apiEnv) close(ctx context.Context) error {
	var errs []string
	for _, rt := range e.rts {
		cs, err := rt.List(ctx)
		if err != nil {
			errs = append(errs, err.Error())
		}
		for _, c := range cs {
			if err := rt.Delete(ctx, c.ID); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if e.net != nil {
		if err := e.net.Close(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if e.images != nil {
		e.images.Close()
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench runtime cleanup: %s", strings.Join(errs, "; "))
	}
	return nil
}

// apiSubject runs /bin/true through the runtime API: a namespace from the
// network manager, then either Create+Start (split) or Run (one `runc run
// --detach`, the daemon's hot path), Wait, Delete and Release.
type apiSubject struct {
	env    *apiEnv
	rt     *runtime.Runtime
	log    *phaseLog
	mode   network.Mode
	split  bool
	prefix string
}

func (s *apiSubject) run(ctx context.Context, i int) (map[string]time.Duration, error) {
	id := fmt.Sprintf("%s%d", s.prefix, i)
	spec := runtime.Spec{ID: id, Layers: s.env.layers, Args: []string{"/bin/true"}, ReadOnlyRootfs: true}
	t0 := time.Now()
	att, err := s.env.net.Acquire(ctx, id, s.mode)
	if err != nil {
		return nil, fmt.Errorf("container %q: network %s: %w", id, s.mode, err)
	}
	spec.NetNSPath = att.NSPath
	fail := func(err error) (map[string]time.Duration, error) {
		cctx := context.WithoutCancel(ctx)
		s.rt.Delete(cctx, id)
		s.env.net.Release(cctx, att)
		return nil, err
	}
	t1 := time.Now()
	if s.split {
		_, err = s.rt.Create(ctx, spec)
	} else {
		_, err = s.rt.Run(ctx, spec)
	}
	if err != nil {
		return fail(err)
	}
	t2 := time.Now()
	if s.split {
		if err := s.rt.Start(ctx, id); err != nil {
			return fail(err)
		}
	}
	t3 := time.Now()
	st, err := s.rt.Wait(ctx, id)
	if err != nil {
		return fail(err)
	}
	if st.Code != 0 {
		return fail(fmt.Errorf("container %q: /bin/true exited %d", id, st.Code))
	}
	t4 := time.Now()
	if err := s.rt.Delete(ctx, id); err != nil {
		return fail(err)
	}
	if err := s.env.net.Release(ctx, att); err != nil {
		return nil, fmt.Errorf("container %q: release network: %w", id, err)
	}
	t5 := time.Now()
	times := map[string]time.Duration{
		kit.PhaseNet: t1.Sub(t0), kit.PhaseCreate: t2.Sub(t1), kit.PhaseExec: t4.Sub(t3),
		kit.PhaseDelete: t5.Sub(t4), kit.PhaseTotal: t5.Sub(t0),
	}
	if s.split {
		times[kit.PhaseStart] = t3.Sub(t2)
	}
	return times, nil
}

// phaseLog collects the durations the runtime logs at debug level
// ("container created": bundle, runtime; "container deleted": runtime, total),
// keyed "created.bundle" and so on.
type phaseLog struct {
	mu sync.Mutex
	m  map[string][]time.Duration
}

func (p *phaseLog) Enabled(_ context.Context, l slog.Level) bool { return true }
func (p *phaseLog) WithAttrs([]slog.Attr) slog.Handler           { return p }
func (p *phaseLog) WithGroup(string) slog.Handler                { return p }
func (p *phaseLog) Handle(_ context.Context, rec slog.Record) error {
	msg := strings.TrimPrefix(rec.Message, "container ")
	rec.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() != slog.KindString {
			return true
		}
		if d, err := time.ParseDuration(a.Value.String()); err == nil {
			p.mu.Lock()
			p.m[msg+"."+a.Key] = append(p.m[msg+"."+a.Key], d)
			p.mu.Unlock()
		}
		return true
	})
	if rec.Level >= slog.LevelWarn {
		fmt.Fprintf(os.Stderr, "runtime: %s\n", rec.Message)
	}
	return nil
}

func (p *phaseLog) reset() {
	p.mu.Lock()
	p.m = map[string][]time.Duration{}
	p.mu.Unlock()
}

func (p *phaseLog) snapshot() map[string][]time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]time.Duration, len(p.m))
	for k, v := range p.m {
		out[k] = append([]time.Duration(nil), v...)
	}
	return out
}
