package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// Options configure a Manager. StateDir and CNIConfDir are required.
type Options struct {
	// StateDir holds the namespace bind mounts, e.g. /run/shoal/netns. It is
	// made a shared mount point.
	StateDir string
	// CNIBinDirs are searched for the plugins (default /usr/lib/cni and
	// /opt/cni/bin).
	CNIBinDirs []string
	// CNIConfDir receives the bundled conflist and holds libcni's cache and
	// host-local's address reservations, e.g. <data>/cni.
	CNIConfDir string
	// Subnet of the bridges, IPv4 (default 10.77.0.0/16), cut into one
	// slice per bridge. The first bridge's gateway is its first address.
	Subnet string
	// Bridge is the name of the first host bridge (default shoal0); the
	// others are Bridge-1, Bridge-2 …
	Bridge string
	// BridgePorts is how many attachments a bridge takes, which sizes
	// the slices (default and at most DefaultBridgePorts, a /22 each).
	BridgePorts int
	// PoolSize is how many ready namespaces to keep per mode. 0 means the
	// defaults (4 for None, 2 for Bridge); a negative value turns the pool off.
	PoolSize int
	// Logger receives pool and cleanup events (default slog.Default()).
	Logger *slog.Logger
	// Clock times the policy guard (default clock.Real).
	Clock clock.Clock
	// PolicyCheck is how often the guard checks the bridge's nftables
	// table and rebuilds it when it was changed from outside (default
	// 2s).
	PolicyCheck time.Duration
}

// Attachment is a namespace handed to a container. The runtime puts NSPath
// into the OCI spec as the path of the network namespace.
type Attachment struct {
	ID        string // name of the namespace, also its CNI container ID
	Mode      Mode
	NSPath    string
	IP        net.IP // nil in None mode
	Gateway   net.IP // nil in None mode
	Interface string // "eth0" in Bridge mode, "" in None mode

	holder string // container the Manager handed it to; "" if rebuilt
}

// PoolStats counts what the Manager holds and has done.
type PoolStats struct {
	Ready      map[Mode]int // pooled namespaces per mode
	InUse      int          // namespaces acquired and not released
	Hits       uint64       // Acquire calls served from the pool
	Misses     uint64       // Acquire calls that made a namespace on the spot
	Created    uint64
	Destroyed  uint64
	FillErrors uint64 // failed background creations
	Reused     uint64 // namespaces Recycle put back in the pool
	Dirty      uint64 // namespaces Recycle destroyed for what was left in them
	// PolicyRebuilds counts rebuilds of the policy table found changed
	// from outside.
	PolicyRebuilds uint64
}

// opTimeout bounds one CNI operation of a background creation or
// teardown, from when it gets its turn at the gate (cniGate).
const opTimeout = 30 * time.Second

// entry is one namespace the Manager knows about.
type entry struct {
	name      string
	mode      Mode
	path      string
	ip, gw    net.IP
	br        int    // index of the bridge (Bridge mode)
	container string // "" while being created, checked or pooled
	reused    bool   // came back through Recycle: expected back while out
}

func (e *entry) attachment() *Attachment {
	a := &Attachment{ID: e.name, Mode: e.mode, NSPath: e.path, IP: e.ip, Gateway: e.gw, holder: e.container}
	if e.mode == Bridge {
		a.Interface = ifName
	}
	return a
}

// Manager hands out network namespaces and keeps a pool of ready ones.
// It is safe for concurrent use.
type Manager struct {
	o        Options
	log      *slog.Logger
	cni      *cniNet
	br       bridgeSet
	old      string // why br is an earlier daemon's single bridge, if it is
	pol      *policy
	boundDir bool // New bound StateDir onto itself

	mu          sync.Mutex
	closed      bool
	pool        map[Mode][]*entry
	owned       map[string]*entry // by name: being created, pooled or in use
	byContainer map[string]*entry // nil while an Acquire is creating one
	checking    int               // None namespaces Recycle is checking
	ports       []int             // owned Bridge namespaces by bridge
	stats       PoolStats

	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	guardDone chan struct{}
}

// New validates o, prepares StateDir, writes the bundled CNI configuration,
// checks that the plugins are installed and starts filling the pool.
func New(ctx context.Context, o Options) (*Manager, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	subnet, err := netip.ParsePrefix(o.Subnet)
	if err != nil || !subnet.Addr().Is4() || subnet.Bits() > 30 || subnet.Masked() != subnet {
		return nil, errdefs.Invalid("subnet", "%q is not an IPv4 network of at most /30 such as 10.77.0.0/16", o.Subnet)
	}
	br := newBridgeSet(o.Bridge, subnet, o.BridgePorts)
	if err := checkSubnet(subnet, br); err != nil {
		return nil, err
	}
	mtu := hostMTU()
	c, err := newCNINet(&o, br, mtu)
	if err != nil {
		return nil, err
	}
	old := oldLayout(o.StateDir, br, c)
	if old != "" {
		for _, b := range br.names[1:] {
			os.Remove(filepath.Join(o.CNIConfDir, "shoal-"+b+".conflist"))
		}
		br = singleBridge(o.Bridge, subnet)
		if c, err = newCNINet(&o, br, mtu); err != nil {
			return nil, err
		}
		o.Logger.Warn("network: keeping the single-bridge layout of an earlier daemon, on the whole subnet, until the daemon restarts with no replica left",
			"bridge", o.Bridge, "subnet", subnet, "why", old, "ports", br.ports)
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	bound, err := makeShared(o.StateDir)
	if err != nil {
		return nil, err
	}
	pol, err := openPolicy(br, o.StateDir, o.Logger)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		o: o, log: o.Logger, cni: c, br: br, old: old, pol: pol, boundDir: bound,
		ports:       make([]int, len(br.names)),
		pool:        map[Mode][]*entry{},
		owned:       map[string]*entry{},
		byContainer: map[string]*entry{},
		kick:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		guardDone:   make(chan struct{}),
	}
	go m.fill()
	go m.guard()
	m.refill()
	return m, nil
}

func (o *Options) defaults() error {
	if o.StateDir == "" || !filepath.IsAbs(o.StateDir) {
		return errdefs.Invalid("state dir", "%q is not an absolute path", o.StateDir)
	}
	if o.CNIConfDir == "" || !filepath.IsAbs(o.CNIConfDir) {
		return errdefs.Invalid("cni conf dir", "%q is not an absolute path", o.CNIConfDir)
	}
	o.StateDir = filepath.Clean(o.StateDir)
	o.CNIConfDir = filepath.Clean(o.CNIConfDir)
	if len(o.CNIBinDirs) == 0 {
		o.CNIBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}
	}
	if o.Subnet == "" {
		o.Subnet = "10.77.0.0/16"
	}
	if o.Bridge == "" {
		o.Bridge = "shoal0"
	}
	if !bridgeName().MatchString(o.Bridge) {
		return errdefs.Invalid("bridge", "%q is not an interface name (1-15 of a-z A-Z 0-9 _ . -)", o.Bridge)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.PolicyCheck <= 0 {
		o.PolicyCheck = 2 * time.Second
	}
	return nil
}

var (
	bridgeName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,14}$`) })
	nsName     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(none|bridge)-[0-9a-f]{16}$`) })
)

// poolTarget is how many ready namespaces of mode the pool keeps.
func (m *Manager) poolTarget(mode Mode) int {
	switch {
	case m.o.PoolSize < 0:
		return 0
	case m.o.PoolSize > 0:
		return m.o.PoolSize
	case mode == None:
		return 4
	}
	return 2
}

// Acquire gives containerID a namespace of the given mode, from the pool
// when one is ready and made on the spot otherwise. A container holds at
// most one attachment.
func (m *Manager) Acquire(ctx context.Context, containerID string, mode Mode) (*Attachment, error) {
	if containerID == "" {
		return nil, errdefs.Invalid("container", "empty container id")
	}
	if !mode.valid() {
		return nil, errdefs.Invalid("network", "unknown network mode %q (want none or bridge)", mode)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("network manager: closed: %w", errdefs.ErrUnavailable)
	}
	if _, ok := m.byContainer[containerID]; ok {
		m.mu.Unlock()
		return nil, fmt.Errorf("container %q: network already attached: %w", containerID, errdefs.ErrConflict)
	}
	if ready := m.pool[mode]; len(ready) > 0 {
		e := ready[len(ready)-1]
		m.pool[mode] = ready[:len(ready)-1]
		e.container = containerID
		m.byContainer[containerID] = e
		m.stats.Hits++
		m.mu.Unlock()
		m.refill()
		return e.attachment(), nil
	}
	m.byContainer[containerID] = nil // reserved while the namespace is made
	m.stats.Misses++
	m.mu.Unlock()
	m.refill()

	e, err := m.create(ctx, mode)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		delete(m.byContainer, containerID)
		return nil, fmt.Errorf("container %q: %w", containerID, err)
	}
	e.container = containerID
	m.byContainer[containerID] = e
	return e.attachment(), nil
}

// Lookup returns the attachment of containerID, if it holds one.
func (m *Manager) Lookup(containerID string) (*Attachment, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byContainer[containerID]
	if e == nil {
		return nil, false
	}
	return e.attachment(), true
}

// Release detaches and removes the namespace of a. Only a.NSPath is used,
// so an Attachment rebuilt from a stored path after a restart works too.
// Releasing a namespace that is already gone is not an error; releasing
// one that went to another container since (through Recycle) is a
// conflict. A holder that knows every process in a None namespace has
// ended may give it back with Recycle instead.
//
// A Bridge release takes tens of milliseconds, nearly all of it in the
// plugin's iptables calls; callers on a latency-sensitive path may run it
// in a goroutine.
func (m *Manager) Release(ctx context.Context, a *Attachment) error {
	name, mode, _, err := m.detach(a)
	if err != nil {
		return err
	}
	defer m.refill() // it may have been expected back (see short)
	return m.destroy(ctx, name, mode)
}

// detach ends the hold of a's container on its namespace and returns the
// namespace's entry, nil if the Manager does not own it. The entry is then
// neither acquired nor pooled. Its holder must be the one of a, when a
// came from Acquire or Lookup: an attachment kept after its release must
// not end the hold of the next container that got the namespace.
func (m *Manager) detach(a *Attachment) (string, Mode, *entry, error) {
	if a == nil {
		return "", "", nil, errdefs.Invalid("attachment", "nil attachment")
	}
	name, mode, err := m.parsePath(a.NSPath)
	if err != nil {
		return "", "", nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.owned[name]
	if e == nil {
		return name, mode, nil, nil
	}
	if e.container == "" {
		return "", "", nil, fmt.Errorf("netns %s: not acquired: %w", a.NSPath, errdefs.ErrConflict)
	}
	if a.holder != "" && a.holder != e.container {
		return "", "", nil, fmt.Errorf("netns %s: released by %s, now held by %s: %w", a.NSPath, a.holder, e.container, errdefs.ErrConflict)
	}
	if m.byContainer[e.container] == e {
		delete(m.byContainer, e.container)
	}
	e.container = ""
	return name, mode, e, nil
}

// parsePath checks that path names a namespace file of StateDir and
// returns its name and mode.
func (m *Manager) parsePath(path string) (string, Mode, error) {
	clean := filepath.Clean(path)
	name := filepath.Base(clean)
	if filepath.Dir(clean) != m.o.StateDir || !nsName().MatchString(name) {
		return "", "", errdefs.Invalid("netns path", "%q is not a namespace of %s", path, m.o.StateDir)
	}
	mode := None
	if name[0] == 'b' {
		mode = Bridge
	}
	return name, mode, nil
}

// create makes a namespace and, in Bridge mode, attaches it to the first
// bridge with a port free.
func (m *Manager) create(ctx context.Context, mode Mode) (*entry, error) {
	var b [8]byte
	rand.Read(b[:])
	name := string(mode) + "-" + hex.EncodeToString(b[:])
	e := &entry{name: name, mode: mode, path: filepath.Join(m.o.StateDir, name)}

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("network manager: closed: %w", errdefs.ErrUnavailable)
	}
	if mode == Bridge {
		e.br = slices.IndexFunc(m.ports, func(n int) bool { return n < m.br.ports })
		if e.br < 0 {
			m.mu.Unlock()
			return nil, fmt.Errorf("network: every bridge is full (%d of %d ports each on %s): %w",
				len(m.ports), m.br.ports, m.br.subnet, errdefs.ErrUnavailable)
		}
		m.ports[e.br]++
	}
	m.owned[name] = e
	m.mu.Unlock()

	err := createNetNS(e.path, mode == None)
	if err == nil && mode == Bridge {
		var port string
		e.ip, e.gw, port, err = m.cni.add(ctx, e.br, name, e.path)
		if err == nil {
			// Isolated before anyone gets the namespace; the bridge,
			// made by the first add, gets its settings too.
			err = errors.Join(isolatePort(port), bridgeSettings(m.br.names[e.br]))
			if err != nil {
				err = errors.Join(err, m.cni.del(context.WithoutCancel(ctx), e.br, name, e.path))
			}
		}
		if err != nil {
			err = errors.Join(err, destroyNetNS(e.path))
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.disown(e)
		return nil, err
	}
	m.stats.Created++
	return e, nil
}

// disown forgets e, freeing its bridge port. m.mu is held.
func (m *Manager) disown(e *entry) {
	if m.owned[e.name] != e {
		return
	}
	delete(m.owned, e.name)
	if e.mode == Bridge && e.br >= 0 {
		m.ports[e.br]--
	}
}

// destroy detaches (Bridge) and removes the namespace name. The namespace
// is removed even when the CNI DEL fails; the DEL is retried by Restore,
// since libcni keeps its cache entry until a DEL succeeds.
func (m *Manager) destroy(ctx context.Context, name string, mode Mode) error {
	path := filepath.Join(m.o.StateDir, name)
	m.mu.Lock()
	e := m.owned[name]
	m.mu.Unlock()
	var errs []error
	if mode == Bridge {
		// The policy goes first: the address may go to another
		// namespace once the DEL frees it.
		errs = append(errs, m.pol.drop(name))
		// A file that is not a namespace (a daemon killed while it made
		// one leaves the empty file before the bind mount) is not named
		// to CNI: the plugins refuse it, and DEL without a namespace still
		// frees the attachment's address and rules.
		nsPath := path
		if !isNetNS(path) {
			nsPath = ""
		}
		br := -1
		if e != nil {
			br = e.br
		}
		if br < 0 {
			// Not made here: the bridge libcni recorded, the first one
			// when there is no record (DEL then frees what is left).
			br, _, _, _ = m.cni.cached(name, nsPath)
			br = max(br, 0)
		}
		errs = append(errs, m.cni.del(ctx, br, name, nsPath))
	}
	errs = append(errs, destroyNetNS(path))
	m.mu.Lock()
	if e != nil {
		m.disown(e)
	}
	m.stats.Destroyed++
	m.mu.Unlock()
	return errors.Join(errs...)
}

// Stats returns the pool's counters.
func (m *Manager) Stats() PoolStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	m.pol.mu.Lock()
	s.PolicyRebuilds = m.pol.rebuilds
	m.pol.mu.Unlock()
	s.Ready = map[Mode]int{}
	for _, mode := range modes {
		s.Ready[mode] = len(m.pool[mode])
	}
	for _, e := range m.byContainer {
		if e != nil {
			s.InUse++
		}
	}
	return s
}

// refill wakes the pool filler.
func (m *Manager) refill() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Gateway is the first bridge's own address, the subnet's first:
// containers on every bridge reach the host there.
func (m *Manager) Gateway() net.IP {
	p := netip.MustParsePrefix(m.o.Subnet) // checked by New
	return net.IP(p.Addr().Next().AsSlice())
}
