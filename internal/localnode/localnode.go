// Package localnode runs replicas on this host: it is this host's
// node.Node, made of the runtime's containers, the bridge network's
// addresses, placement's CPUs and the router's count of requests in
// flight. serving drives it; a node of a cluster also serves it to the
// leader through its agent.
package localnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/placement"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/statemerge"
	"github.com/shoal-run/shoal/internal/volume"
)

// Runtime is what a node needs of the container runtime.
type Runtime interface {
	Run(ctx context.Context, s runtime.Spec) (*runtime.Container, error)
	Wait(ctx context.Context, id string) (runtime.ExitStatus, error)
	Stop(ctx context.Context, id string, grace time.Duration) (runtime.ExitStatus, error)
	Delete(ctx context.Context, id string) error
	Freeze(id string) error
	Thaw(id string) error
	UpdateCPU(id string, cpus float64) error
	Stats(id string) (runtime.Stats, error)
	// CPUUse reads only the CPU counters autoscaling needs.
	CPUUse(id string) (runtime.CPUUse, error)
	Get(id string) (*runtime.Container, error)
	// Exec runs a process in a running container (command health checks).
	Exec(ctx context.Context, id string, p runtime.ExecSpec) (runtime.ExitStatus, error)
}

// Placer picks the CPUs a replica is pinned to (a placement.CPUs): a
// cpuset in the kernel's list format, or "" for none. Adopt tells it of a
// replica a restarted daemon took over; Release frees a replica's place.
type Placer interface {
	Place(r placement.Request) string
	Adopt(id, app, cpuset string)
	Release(id string)
}

// Images resolves an app's image.
type Images interface {
	Get(ctx context.Context, ref string) (image.Image, error)
}

// Network gives replicas an address on the host bridge, and what they may
// reach from it (SetPolicy, before the replica's container runs).
type Network interface {
	Acquire(ctx context.Context, id string, mode network.Mode) (*network.Attachment, error)
	SetPolicy(a *network.Attachment, p network.Policy) error
	Lookup(id string) (*network.Attachment, bool)
	Release(ctx context.Context, a *network.Attachment) error
}

// Router is the proxy's count of a replica's requests in flight: WaitIdle
// returns when its last request is done.
type Router interface {
	WaitIdle(ctx context.Context, endpointID string) error
}

// Confiner runs an app's containers in a user namespace of the app's own
// (see internal/userns).
type Confiner interface {
	// Confine changes spec, a container of app, to run in app's user
	// namespace, claiming the app's host ids the first time.
	Confine(ctx context.Context, app string, spec *runtime.Spec) error
	// Range is app's user namespace, claimed the first time.
	Range(ctx context.Context, app string) (runtime.UserNS, error)
}

// Options configure a Node.
type Options struct {
	Runtime Runtime
	Images  Images
	Network Network
	Router  Router
	// Placer pins replicas to CPUs; nil pins none.
	Placer Placer
	// Dir is the apps' folder: a spec's relative paths are under it.
	Dir string
	// Init is the host path of shoal-init ("": none), see InitPath.
	Init string
	// Confiner, if set, runs each app's replicas in the app's user
	// namespace.
	Confiner Confiner
	// SecretsDir is where replicas' /run/secrets are made on the host
	// (a tmpfs: the run dir); "": replicas have none. Secrets opens the
	// values the manifests name.
	SecretsDir string
	Secrets    Secrets
	Clock      clock.Clock
	Logger     *slog.Logger
	// Version is the daemon's, which HTTP health checks send in their
	// User-Agent ("": dev).
	Version string
	// PeerHost is the node's address in a cluster (its --advertise), on
	// which it publishes its stateful replicas' peer ports; not valid on
	// a single host, where the replicas reach each other on the bridge.
	PeerHost netip.Addr
}

// Node runs replicas on this host.
type Node struct {
	rt       Runtime
	net      Network
	placer   Placer
	images   Images
	router   Router
	clock    clock.Clock
	log      *slog.Logger
	dir      string
	init     string
	confiner Confiner
	agent    string // HTTP health checks' User-Agent
	peerHost netip.Addr
	// secretsRoot and secrets: see Options.SecretsDir and Secrets.
	secretsRoot string
	secrets     Secrets
	volumes     volume.Preparer

	mu  sync.Mutex
	att map[string]*network.Attachment // replica id → its address
	// logs are the logs of the replicas another node of a cluster started
	// here: this node trims them at each check and removes them with the
	// replica (the leader's own are its driver's to keep).
	logs map[string]string
	// probes are the replicas' HTTP check transports (check.go).
	probes map[string]*http.Transport
	// premade are the premade replicas not booted yet (premade.go).
	premade map[string]*waiting
}

var (
	_ node.Node        = (*Node)(nil)
	_ node.LogTailer   = (*Node)(nil)
	_ node.LogFollower = (*Node)(nil)
	_ node.StateSource = (*Node)(nil)
	_ node.Premaker    = (*Node)(nil)
)

// New returns this host's Node.
func New(o Options) (*Node, error) {
	if o.Runtime == nil || o.Images == nil || o.Network == nil || o.Router == nil {
		return nil, errors.New("localnode: runtime, images, network and router are required")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Placer == nil {
		o.Placer = placement.NewCPUs(nil, nil)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	n := &Node{rt: o.Runtime, net: o.Network, placer: o.Placer, images: o.Images, router: o.Router, clock: o.Clock,
		log: o.Logger, dir: o.Dir, init: o.Init, confiner: o.Confiner, agent: HealthAgent + "/" + o.Version, peerHost: o.PeerHost,
		secretsRoot: o.SecretsDir, secrets: o.Secrets, att: map[string]*network.Attachment{}, logs: map[string]string{},
		premade: map[string]*waiting{}}
	n.dropAllCheckpoints()
	return n, nil
}

// InitPath is where a replica of an app with init = true sees shoal-init,
// its pid 1 (read-only, on the container's own /dev tmpfs).
const InitPath = "/dev/shoal-init"

// bridge is how replicas are networked: the proxy reaches them on the host
// bridge.
const bridge = network.Bridge

func (n *Node) Start(ctx context.Context, s node.ReplicaSpec) (node.Started, error) {
	return n.start(ctx, s, nil)
}

// start makes replica s and runs its container; with ahead set, its
// process is shoal-init waiting on stdin for ahead's command (Premake).
func (n *Node) start(ctx context.Context, s node.ReplicaSpec, ahead func(spec *runtime.Spec) error) (node.Started, error) {
	var st node.Started
	t0 := time.Now()
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
	if err := n.prepareVolumes(ctx, s, spec); err != nil {
		return st, err
	}
	if n.confiner != nil {
		if err := n.confiner.Confine(ctx, s.App, &spec); err != nil {
			return st, fmt.Errorf("user namespace: %w", err)
		}
	}
	if err := n.mountSecrets(ctx, s, &spec); err != nil {
		return st, err
	}
	st.CPUSet = n.placer.Place(placement.Request{ID: s.ID, App: s.App, MaxCPU: s.Config.Resources.MaxCPU})
	spec.Limits.CPUSet = st.CPUSet
	tSpec := time.Now()
	att, err := n.net.Acquire(ctx, s.ID, bridge)
	if err != nil {
		return st, fmt.Errorf("network: %w", err)
	}
	n.mu.Lock()
	n.att[s.ID] = att
	n.mu.Unlock()
	nc := s.Config.Network
	allow := nc.Allow
	if s.Config.Stateful.Enabled() {
		// A stateful app's replicas reach each other (a cluster's members).
		allow = append(slices.Clone(allow), s.App)
	}
	pol := network.Policy{App: s.App, Egress: network.Egress(nc.EgressMode()), Allow: allow}
	if sf := s.Config.Stateful; sf.Enabled() {
		advertise := att.IP.String()
		if len(sf.PeerPorts) > 0 && n.peerHost.IsValid() {
			for _, p := range sf.PeerPorts {
				pol.PeerPorts = append(pol.PeerPorts, uint16(p))
			}
			pol.Publish, advertise = n.peerHost, n.peerHost.String()
		}
		spec.Env = append(spec.Env, EnvAdvertiseHost+"="+advertise)
	}
	if err := n.net.SetPolicy(att, pol); err != nil {
		return st, fmt.Errorf("network policy: %w", err)
	}
	st.Addr = net.JoinHostPort(att.IP.String(), strconv.Itoa(s.Config.Port))
	spec.NetNSPath = att.NSPath
	if spec.UserNS != nil {
		if err := network.AllowLowPorts(att.NSPath); err != nil {
			return st, fmt.Errorf("network: %w", err)
		}
	}
	tNet := time.Now()
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return st, fmt.Errorf("log: %w", err)
	}
	var writer *exec.Cmd
	if n.init != "" { // the replica writes to a pipe, its lines stamped
		out, w, err := logWriter(n.init, logf)
		logf.Close()
		if err != nil {
			return st, fmt.Errorf("log: %w", err)
		}
		writer, logf = w, out
		defer func() { go w.Wait() }() //nolint:errcheck // it ends with the replica
	}
	if err := ownLog(logf, &spec); err != nil {
		logf.Close()
		return st, fmt.Errorf("log: %w", err)
	}
	spec.Stdout, spec.Stderr = logf, logf
	// Only a replica writing to a pipe can be dumped (CRIU dumps no file
	// of the host's): one with shoal-init's log writer.
	spec.Checkpointable = s.Checkpointable && n.init != ""
	if s.RestoreFrom != "" {
		if spec.RestoreFrom, err = n.checkpointPath(s.RestoreFrom); err != nil {
			logf.Close()
			return st, err
		}
	}
	if ahead != nil {
		if err := ahead(&spec); err != nil {
			logf.Close()
			return st, err
		}
	}
	tLog := time.Now()
	c, err := n.rt.Run(ctx, spec)
	logf.Close()
	if f, ok := spec.Stdin.(*os.File); ok {
		f.Close() // the container's own now
	}
	if err != nil {
		return st, fmt.Errorf("start: %w", err)
	}
	if writer != nil {
		n.chargeWriter(s.ID, writer.Process.Pid)
	}
	st.Pid = c.Pid
	// Where a start's time went (bench fastcontainer reads it): the spec
	// (image, volumes, user namespace, secrets), the network namespace
	// and its policy, the log pipe, the container.
	n.log.Debug("replica start timing", "replica", s.ID, "restore", s.RestoreFrom != "", "spec", tSpec.Sub(t0),
		"network", tNet.Sub(tSpec), "log", tLog.Sub(tNet), "container_ns", time.Since(tLog))
	return st, nil
}

// spec builds the container of a replica.
func (n *Node) spec(ctx context.Context, s node.ReplicaSpec) (runtime.Spec, error) {
	cfg := s.Config
	img, err := n.images.Get(ctx, s.Digest)
	if err != nil {
		return runtime.Spec{}, fmt.Errorf("image %s (%s): %w", cfg.Image, s.Digest, err)
	}
	args := cfg.Argv(img.Config.Entrypoint, img.Config.Cmd)
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
	if s.Checkpointable {
		env = noMPTCP(env)
	}
	cwd := img.Config.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	ms := runtimeMounts(s.Mounts)
	hostname := s.ID
	for _, e := range s.Env {
		if name, ok := strings.CutPrefix(e, "SHOAL_NAME="); ok && cfg.Stateful.Enabled() && manifest.IsDNSLabel(name) {
			hostname = name // a stateful app's ordinal: its stable name
		}
	}
	if cfg.Init && n.init != "" {
		args = append([]string{InitPath, "init"}, args...)
		ms = append(ms, runtime.Mount{Source: n.init, Destination: InitPath, ReadOnly: true, Options: []string{"nosuid", "nodev"}})
	}
	return runtime.Spec{
		ID: s.ID, Layers: img.Layers, Args: args, Env: env, Cwd: cwd, User: img.Config.User,
		Hostname: hostname, Mounts: ms, DiskBytes: cfg.Resources.DiskBytes(), StopSignal: cfg.Signal(img.Config.StopSignal),
		Limits: runtime.Limits{CPUs: cfg.Resources.CPU, MemoryBytes: cfg.Resources.MemoryBytes(), Pids: cfg.Resources.Pids},
		Labels: map[string]string{labels.Kind: labels.KindReplica, labels.App: cfg.Name, labels.Revision: strconv.Itoa(s.Revision),
			labels.Digest: s.Digest, labels.Image: cfg.Image},
	}, nil
}

func (n *Node) Freeze(_ context.Context, id string) (int64, error) {
	n.dropProbe(id)
	if err := n.rt.Freeze(id); err != nil {
		return 0, err
	}
	var mem int64
	if st, err := n.rt.Stats(id); err == nil {
		mem = int64(st.MemoryBytes)
	}
	return mem, nil
}

func (n *Node) Thaw(_ context.Context, id string) error { return n.rt.Thaw(id) }

// Drain waits on the router, whose route no longer has the replica, for
// at most grace on the node's clock.
func (n *Node) Drain(ctx context.Context, id string, grace time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if grace <= 0 {
		cancel()
	}
	t := n.clock.AfterFunc(grace, cancel)
	defer t.Stop()
	return n.router.WaitIdle(ctx, id)
}

func (n *Node) Stop(ctx context.Context, id string, grace time.Duration) error {
	defer n.dropProbe(id)
	n.unwait(id)
	if _, err := n.rt.Stop(ctx, id, grace); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("replica %s: stop: %w", id, err)
	}
	return nil
}

// releaseTimeout bounds the release of a removed replica's network (CNI DEL).
const releaseTimeout = 30 * time.Second

func (n *Node) Remove(ctx context.Context, id string) error {
	defer n.dropProbe(id)
	n.unwait(id)
	err := n.rt.Delete(ctx, id)
	if errdefs.IsNotFound(err) {
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
	if err == nil {
		if serr := n.dropSecrets(id); serr != nil {
			n.log.Warn("localnode: remove replica secrets", "replica", id, "err", serr)
		}
	}
	if att == nil {
		// node.Started by an earlier daemon and never adopted by this one
		// (a node of a cluster whose leader has not asked yet).
		att, _ = n.net.Lookup(id)
	}
	if att != nil {
		// Its own bound: a delete that used up ctx waiting for the exit
		// must not keep the address and its nat rule.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		if rerr := n.net.Release(rctx, att); rerr != nil {
			n.log.Warn("localnode: release replica network", "replica", id, "err", rerr)
		}
		cancel()
	}
	if err != nil {
		return fmt.Errorf("replica %s: delete container: %w", id, err)
	}
	return nil
}

func (n *Node) Wait(ctx context.Context, id string) (node.ExitStatus, error) {
	st, err := n.rt.Wait(ctx, id)
	return node.ExitStatus{Code: st.Code, Signal: st.Signal, OOMKilled: st.OOMKilled, Known: st.Known}, err
}

func (n *Node) Check(ctx context.Context, id, addr string, h manifest.Health) error {
	n.mu.Lock()
	lp := n.logs[id]
	n.mu.Unlock()
	if lp != "" {
		if err := node.RotateLog(lp, node.LogMax); err != nil && !errors.Is(err, os.ErrNotExist) {
			n.log.Warn("localnode: replica log", "replica", id, "err", err)
		}
	}
	if h.Command != nil {
		return n.runCheck(ctx, h, id)
	}
	var c *http.Client
	if h.HTTP != "" && !h.GRPC {
		c = n.probeClient(id)
	}
	return probe(ctx, c, h, addr, n.agent)
}

func (n *Node) Usage(_ context.Context, id string) (node.CPUUse, error) {
	u, err := n.rt.CPUUse(id)
	return node.CPUUse{Periods: u.Periods, Throttled: u.Throttled, Used: u.Used, Stalled: u.Stalled, Pressure: u.Pressure}, err
}

func (n *Node) SetCPU(_ context.Context, id string, cpus float64) error {
	return n.rt.UpdateCPU(id, cpus)
}

func (n *Node) Adopt(_ context.Context, rec node.Known) (node.Adopted, error) {
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
	if errdefs.IsNotFound(err) {
		return node.Adopted{}, nil
	}
	if err != nil {
		return node.Adopted{}, fmt.Errorf("replica %s: %w", rec.ID, err)
	}
	if c.Status == runtime.StatusStopped {
		return node.Adopted{}, nil
	}
	if rec.CPUSet != "" {
		n.placer.Adopt(rec.ID, rec.App, rec.CPUSet)
	}
	ad := node.Adopted{Running: true, Frozen: c.Status == runtime.StatusPaused, Pid: c.Pid, Addr: addr}
	if ad.Frozen {
		if st, err := n.rt.Stats(rec.ID); err == nil {
			ad.Memory = int64(st.MemoryBytes)
		}
	}
	return ad, nil
}

func (n *Node) Release(_ context.Context, id string) error {
	n.placer.Release(id)
	return nil
}

// localize makes the relative paths of a spec from another node (its log
// and mount sources, see relocate) paths under this node's apps folder,
// and makes their folders.
func (n *Node) localize(s node.ReplicaSpec) (node.ReplicaSpec, error) {
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
	mounts := make([]node.Mount, len(s.Mounts))
	for i, mt := range s.Mounts {
		// A volume is made at its first start here (prepareVolumes).
		_, isVolume := volumeOf(s.Config, mt)
		if mt.Source, err = place(mt.Source, !isVolume); err != nil {
			return s, fmt.Errorf("mount %s: %w", mt.Destination, err)
		}
		mounts[i] = mt
	}
	s.Mounts = mounts
	return s, nil
}

// TailLog reads the log of a replica another node started here.
func (n *Node) TailLog(ctx context.Context, id, log string, lines int) (node.LogTail, error) {
	t, err := node.ReadLogTail(n.dir, log, lines)
	if err != nil {
		return t, fmt.Errorf("replica %s: %w", id, err)
	}
	return t, nil
}

// FollowLog reads what the log of a replica another node started here
// gained since c.
func (n *Node) FollowLog(ctx context.Context, id, log string, c node.LogCursor) (node.LogTail, error) {
	t, err := node.FollowLogAt(n.dir, log, c)
	if err != nil {
		return t, fmt.Errorf("replica %s: %w", id, err)
	}
	return t, nil
}

// under is the relative path rel under the node's apps folder, or an error
// for a path that leaves it.
func (n *Node) under(rel string) (string, error) {
	if !filepath.IsLocal(rel) || n.dir == "" {
		return "", fmt.Errorf("path %q is not under the apps folder", rel)
	}
	return filepath.Join(n.dir, rel), nil
}

// SendState writes the state area of a replica another node started here.
func (n *Node) SendState(ctx context.Context, id, area string, w io.Writer) error {
	p, err := n.under(area)
	if err == nil {
		_, err = statemerge.WriteTar(p, w, node.StateMax)
	}
	if err != nil {
		return fmt.Errorf("replica %s: %w", id, err)
	}
	return nil
}

// DropState removes the state area of a replica another node started here.
func (n *Node) DropState(ctx context.Context, id, area string) error {
	p, err := n.under(area)
	if err == nil {
		err = os.RemoveAll(p)
	}
	if err != nil {
		return fmt.Errorf("replica %s: state: %w", id, err)
	}
	return nil
}

// ownLog gives the log file (or pipe) of a container in a user namespace
// to the container's root: a program that opens /dev/stdout or /dev/stderr
// (as nginx does) opens it again, as that root.
func ownLog(f *os.File, spec *runtime.Spec) error {
	if spec.UserNS == nil {
		return nil
	}
	return f.Chown(int(spec.UserNS.HostID), int(spec.UserNS.HostID))
}

// runtimeMounts turns a spec's mounts into the runtime's.
func runtimeMounts(ms []node.Mount) []runtime.Mount {
	out := make([]runtime.Mount, len(ms))
	for i, m := range ms {
		out[i] = runtime.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly, Type: m.Type,
			Options: m.Options, SizeBytes: m.SizeBytes}
	}
	return out
}

// EnvAdvertiseHost is, in a stateful app's replica, the address its peers
// reach its peer ports at: its node's in a cluster where the app has
// stateful.peer_ports, else its own (README, Running a database).
const EnvAdvertiseHost = "SHOAL_ADVERTISE_HOST"
