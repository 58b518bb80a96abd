package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/placement"
	"github.com/shoal-run/shoal/internal/runtime"
)

// localNode runs replicas on this host: the runtime's containers, the
// bridge network's addresses, placement's CPUs and the router's count of
// requests in flight.
type localNode struct {
	rt     Runtime
	net    Network
	placer Placer
	images Images
	router Router
	clock  clock.Clock
	log    *slog.Logger
	dir    string // the apps' folder: a spec's relative paths are under it
	init   string // shoal-init on the host ("": none)
	// confiner, if set, runs each app's replicas in the app's user
	// namespace.
	confiner Confiner

	mu  sync.Mutex
	att map[string]*network.Attachment // replica id → its address
	// logs are the logs of the replicas another node of a cluster started
	// here: this node trims them at each check and removes them with the
	// replica (the leader's own are its driver's to keep).
	logs map[string]string
}

var _ Node = (*localNode)(nil)

func newLocalNode(o Options) *localNode {
	return &localNode{rt: o.Runtime, net: o.Network, placer: o.Placer, images: o.Images, router: o.Router, clock: o.Clock,
		log: o.Logger, dir: o.Dir, init: o.Init, confiner: o.Confiner, att: map[string]*network.Attachment{}, logs: map[string]string{}}
}

// InitPath is where a replica of an app with init = true sees shoal-init,
// its pid 1 (read-only, on the container's own /dev tmpfs).
const InitPath = "/dev/shoal-init"

// bridge is how replicas are networked: the proxy reaches them on the host
// bridge.
const bridge = network.Bridge

func (n *localNode) Start(ctx context.Context, s ReplicaSpec) (Started, error) {
	var st Started
	fromPeer := !filepath.IsAbs(s.Log)
	s, err := n.localize(s)
	if err != nil {
		return st, err
	}
	if fromPeer {
		n.mu.Lock()
		n.logs[s.ID] = s.Log
		n.mu.Unlock()
	}
	spec, err := n.spec(ctx, s)
	if err != nil {
		return st, err
	}
	if n.confiner != nil {
		if err := n.confiner.Confine(ctx, s.App, &spec); err != nil {
			return st, fmt.Errorf("user namespace: %w", err)
		}
	}
	st.CPUSet = n.placer.Place(placement.Request{ID: s.ID, App: s.App, MaxCPU: s.Config.Resources.MaxCPU})
	spec.Limits.CPUSet = st.CPUSet
	att, err := n.net.Acquire(ctx, s.ID, bridge)
	if err != nil {
		return st, fmt.Errorf("network: %w", err)
	}
	n.mu.Lock()
	n.att[s.ID] = att
	n.mu.Unlock()
	nc := s.Config.Network
	if err := n.net.SetPolicy(att, network.Policy{App: s.App, Egress: network.Egress(nc.EgressMode()), Allow: nc.Allow}); err != nil {
		return st, fmt.Errorf("network policy: %w", err)
	}
	st.Addr = net.JoinHostPort(att.IP.String(), strconv.Itoa(s.Config.Port))
	spec.NetNSPath = att.NSPath
	if spec.UserNS != nil {
		if err := network.AllowLowPorts(att.NSPath); err != nil {
			return st, fmt.Errorf("network: %w", err)
		}
	}
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return st, fmt.Errorf("log: %w", err)
	}
	if err := ownLog(logf, &spec); err != nil {
		logf.Close()
		return st, fmt.Errorf("log: %w", err)
	}
	spec.Stdout, spec.Stderr = logf, logf
	c, err := n.rt.Run(ctx, spec)
	logf.Close()
	if err != nil {
		return st, fmt.Errorf("start: %w", err)
	}
	st.Pid = c.Pid
	return st, nil
}

// spec builds the container of a replica.
func (n *localNode) spec(ctx context.Context, s ReplicaSpec) (runtime.Spec, error) {
	cfg := s.Config
	img, err := n.images.Get(ctx, s.Digest)
	if err != nil {
		return runtime.Spec{}, fmt.Errorf("image %s (%s): %w", cfg.Image, s.Digest, err)
	}
	args := append(append([]string{}, img.Config.Entrypoint...), img.Config.Cmd...)
	if len(cfg.Command) > 0 {
		args = append(append([]string{}, img.Config.Entrypoint...), cfg.Command...)
	}
	if len(args) == 0 {
		return runtime.Spec{}, fmt.Errorf("image %s has no entrypoint or command; set command in the manifest", cfg.Image)
	}
	env := append([]string{}, img.Config.Env...)
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, "PORT="+strconv.Itoa(cfg.Port), "SHOAL_APP="+cfg.Name, "SHOAL_REPLICA="+s.ID,
		"SHOAL_REVISION="+strconv.Itoa(s.Revision))
	env = append(env, s.Env...)
	cwd := img.Config.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	mounts := s.Mounts
	if cfg.Init && n.init != "" {
		args = append([]string{InitPath, "init"}, args...)
		mounts = append(append([]runtime.Mount{}, mounts...),
			runtime.Mount{Source: n.init, Destination: InitPath, ReadOnly: true, Options: []string{"nosuid", "nodev"}})
	}
	return runtime.Spec{
		ID: s.ID, Layers: img.Layers, Args: args, Env: env, Cwd: cwd, User: img.Config.User,
		Hostname: s.ID, Mounts: mounts, DiskBytes: cfg.Resources.DiskBytes(),
		Limits: runtime.Limits{CPUs: cfg.Resources.CPU, MemoryBytes: cfg.Resources.MemoryBytes(), Pids: cfg.Resources.Pids},
		Labels: map[string]string{labels.Kind: labels.KindReplica, labels.App: cfg.Name, labels.Revision: strconv.Itoa(s.Revision),
			labels.Digest: s.Digest, labels.Image: cfg.Image},
	}, nil
}

func (n *localNode) Freeze(_ context.Context, id string) (int64, error) {
	if err := n.rt.Freeze(id); err != nil {
		return 0, err
	}
	var mem int64
	if st, err := n.rt.Stats(id); err == nil {
		mem = int64(st.MemoryBytes)
	}
	return mem, nil
}

func (n *localNode) Thaw(_ context.Context, id string) error { return n.rt.Thaw(id) }

// Drain waits on the router, whose route no longer has the replica, for
// at most grace on the node's clock.
func (n *localNode) Drain(ctx context.Context, id string, grace time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if grace <= 0 {
		cancel()
	}
	t := n.clock.AfterFunc(grace, cancel)
	defer t.Stop()
	return n.router.WaitIdle(ctx, id)
}

func (n *localNode) Stop(ctx context.Context, id string, grace time.Duration) error {
	if _, err := n.rt.Stop(ctx, id, grace); err != nil && !isNotFound(err) {
		return fmt.Errorf("replica %s: stop: %w", id, err)
	}
	return nil
}

func (n *localNode) Remove(ctx context.Context, id string) error {
	err := n.rt.Delete(ctx, id)
	if isNotFound(err) {
		err = nil
	}
	n.placer.Release(id)
	n.mu.Lock()
	att := n.att[id]
	delete(n.att, id)
	lp := n.logs[id]
	delete(n.logs, id)
	n.mu.Unlock()
	if lp != "" && err == nil {
		os.Remove(lp)
		os.Remove(lp + ".1")
	}
	if att == nil {
		// Started by an earlier daemon and never adopted by this one
		// (a node of a cluster whose leader has not asked yet).
		att, _ = n.net.Lookup(id)
	}
	if att != nil {
		if rerr := n.net.Release(ctx, att); rerr != nil {
			n.log.Warn("serving: release replica network", "replica", id, "err", rerr)
		}
	}
	if err != nil {
		return fmt.Errorf("replica %s: delete container: %w", id, err)
	}
	return nil
}

func (n *localNode) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	return n.rt.Wait(ctx, id)
}

func (n *localNode) Check(ctx context.Context, id, addr string, h manifest.Health) error {
	n.mu.Lock()
	lp := n.logs[id]
	n.mu.Unlock()
	if lp != "" {
		if err := rotateLog(lp, logMax); err != nil && !errors.Is(err, os.ErrNotExist) {
			n.log.Warn("serving: replica log", "replica", id, "err", err)
		}
	}
	if h.Command != nil {
		return n.runCheck(ctx, h, id)
	}
	return probe(ctx, h, addr)
}

// runCheck runs the health command in replica id's container, bounded by
// the check's timeout; exit code 0 is healthy. The command goes through the
// OCI runtime's exec, so it runs as the replica's own process would: same
// namespaces, cgroup (its memory and pids count against the replica's
// limits), user, capabilities, no_new_privs, seccomp filter and rlimits.
func (n *localNode) runCheck(parent context.Context, h manifest.Health, id string) error {
	timeout := h.Timeout.Duration
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	out := &tailWriter{max: 256}
	st, err := n.rt.Exec(ctx, id, runtime.ExecSpec{Args: h.Command, Stdout: out, Stderr: out})
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil:
		return fmt.Errorf("command %q did not finish in %s", h.Command[0], timeout)
	case err != nil:
		return fmt.Errorf("command %q: %w", h.Command[0], err)
	case st.Code != 0:
		msg := fmt.Sprintf("command %q exited with code %d", h.Command[0], st.Code)
		if o := out.String(); o != "" {
			msg += ": " + o
		}
		return errors.New(msg)
	}
	return nil
}

func (n *localNode) Usage(_ context.Context, id string) (uint64, uint64, error) {
	st, err := n.rt.Stats(id)
	return st.NrPeriods, st.NrThrottled, err
}

func (n *localNode) SetCPU(_ context.Context, id string, cpus float64) error {
	return n.rt.UpdateCPU(id, cpus)
}

func (n *localNode) Adopt(_ context.Context, rec Known) (Adopted, error) {
	addr := ""
	if att, ok := n.net.Lookup(rec.ID); ok {
		n.mu.Lock()
		n.att[rec.ID] = att
		n.mu.Unlock()
		if att.IP != nil && rec.Port != 0 {
			addr = net.JoinHostPort(att.IP.String(), strconv.Itoa(rec.Port))
		}
	}
	c, err := n.rt.Get(rec.ID)
	if isNotFound(err) {
		return Adopted{}, nil
	}
	if err != nil {
		return Adopted{}, fmt.Errorf("replica %s: %w", rec.ID, err)
	}
	if c.Status == runtime.StatusStopped {
		return Adopted{}, nil
	}
	if rec.CPUSet != "" {
		n.placer.Adopt(rec.ID, rec.App, rec.CPUSet)
	}
	return Adopted{Running: true, Frozen: c.Status == runtime.StatusPaused, Pid: c.Pid, Addr: addr}, nil
}

func (n *localNode) Release(_ context.Context, id string) error {
	n.placer.Release(id)
	return nil
}

// localize makes the relative paths of a spec from another node (its log
// and mount sources, see relocate) paths under this node's apps folder,
// and makes their folders.
func (n *localNode) localize(s ReplicaSpec) (ReplicaSpec, error) {
	place := func(p string, isDir bool) (string, error) {
		if filepath.IsAbs(p) {
			return p, nil
		}
		if !filepath.IsLocal(p) || n.dir == "" {
			return "", fmt.Errorf("path %q is not under the apps folder", p)
		}
		p = filepath.Join(n.dir, p)
		dir := p
		if !isDir {
			dir = filepath.Dir(p)
		}
		return p, os.MkdirAll(dir, 0o755)
	}
	var err error
	if s.Log, err = place(s.Log, false); err != nil {
		return s, fmt.Errorf("log: %w", err)
	}
	mounts := make([]runtime.Mount, len(s.Mounts))
	for i, mt := range s.Mounts {
		if mt.Source, err = place(mt.Source, true); err != nil {
			return s, fmt.Errorf("mount %s: %w", mt.Destination, err)
		}
		mounts[i] = mt
	}
	s.Mounts = mounts
	return s, nil
}
