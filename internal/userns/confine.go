// Package userns confines app replicas to user namespaces: each app holds
// a range of Size host ids of its own, claimed in the store (so it is the
// same after a restart and on every node of a cluster) and given back when
// the app is deleted. Root in a replica is the range's first id on the
// host; the image's layers are shown to it as its own through idmapped
// mounts (nothing copied), or, where the kernel or file system refuses
// those, through a copy shifted into the range, made once per layer and
// range. Volumes and state areas are owned by the range, and replicas keep
// a small set of capabilities (AppCapabilities).
package userns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/store"
)

// Host id ranges: range i is Base+i*Size .. Base+(i+1)*Size-1. They sit in
// the upper half of the id space, far above the host's own users, its
// subordinate ids (/etc/subuid) and the job sandboxes' tenant ranges.
const (
	Base = 1 << 31
	Size = 65536
	// MaxRanges is how many ranges fit below the kernel's invalid id.
	MaxRanges = (math.MaxUint32 - Base) / Size
)

// AppCapabilities is what a replica's root keeps, in its own user
// namespace only: enough for a server that binds :80 (NET_BIND_SERVICE),
// drops to a user of its own (SETUID, SETGID), owns and reaches its files
// whatever their owner (CHOWN, DAC_OVERRIDE, FOWNER, FSETID) and signals
// its workers (KILL). Docker's MKNOD, SETFCAP, SETPCAP, SYS_CHROOT,
// AUDIT_WRITE and NET_RAW are left out.
var AppCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_NET_BIND_SERVICE", "CAP_SETGID", "CAP_SETUID",
}

// Options configure a Confiner.
type Options struct {
	Store store.Store
	// MountDir holds the idmapped layers, <MountDir>/<range's first id>/<layer>
	// (default /run/shoal-userns). They are mounts, gone with a reboot.
	MountDir string
	// CopyDir holds the shifted copies, <CopyDir>/<range's first id>/<layer>,
	// where idmapped mounts are refused; on the layers' file system.
	CopyDir string
	// NoIdmap makes shifted copies even where idmapped mounts work, and
	// says why in Note.
	NoIdmap string
	Logger  *slog.Logger
}

// Confiner puts replicas in their app's user namespace.
type Confiner struct {
	o      Options
	layers *layers
	note   string

	mu     sync.Mutex
	ranges map[string]uint32 // app → its range's first host id

	// closing is held while layers are mapped, and taken by Close, so
	// that no layer is mounted after Close unmounted them all.
	closing sync.RWMutex
	closed  bool
}

// Open checks that this host runs processes in user namespaces and
// whether it idmaps the layers' file system (where it does not, layers are
// copied, and Note says why). It fails when user namespaces cannot be used:
// the daemon then says apps run without one.
func Open(o Options) (*Confiner, error) {
	if o.Store == nil || o.CopyDir == "" {
		return nil, errors.New("userns: a store and a copy folder are needed")
	}
	if o.MountDir == "" {
		o.MountDir = "/run/shoal-userns"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := runtime.UserNSUsable(Base, Size); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.CopyDir, 0o700); err != nil {
		return nil, fmt.Errorf("userns: %w", err)
	}
	c := &Confiner{o: o, ranges: map[string]uint32{}, layers: &layers{mountDir: o.MountDir, copyDir: o.CopyDir, log: o.Logger}}
	how := fmt.Sprintf("image layers idmapped (nothing copied) under %s", o.MountDir)
	switch {
	case o.NoIdmap != "":
		how = fmt.Sprintf("image layers copied and shifted into the range once per layer under %s (%s)", o.CopyDir, o.NoIdmap)
		c.layers.copy = true
	default:
		if err := probeIdmap(o.CopyDir); err != nil {
			how = fmt.Sprintf("image layers copied and shifted into the range once per layer under %s (idmapped mounts refused: %v)", o.CopyDir, err)
			c.layers.copy = true
			o.Logger.Warn("userns: idmapped layers refused; layers are copied", "err", err)
		}
	}
	c.note = fmt.Sprintf("apps run as root in a user namespace of their own: %d host ids per app from %d up, claimed in the store; capabilities %v in that namespace only; %s",
		Size, uint64(Base), AppCapabilities, how)
	return c, nil
}

// Note says what apps run as, for `shoal info`.
func (c *Confiner) Note() string { return c.note }

// Copies reports whether layers are copied rather than idmapped.
func (c *Confiner) Copies() bool { return c.layers.copy }

// Range returns the user namespace of app's replicas, claiming a range
// for it in the store the first time.
func (c *Confiner) Range(ctx context.Context, app string) (runtime.UserNS, error) {
	c.mu.Lock()
	host, ok := c.ranges[app]
	c.mu.Unlock()
	if ok {
		return runtime.UserNS{HostID: host, Size: Size}, nil
	}
	i, err := store.ClaimIDRange(ctx, c.o.Store, app, MaxRanges)
	if err != nil {
		return runtime.UserNS{}, fmt.Errorf("app %q: %w", app, err)
	}
	host = uint32(Base + uint64(i)*Size)
	c.mu.Lock()
	c.ranges[app] = host
	c.mu.Unlock()
	return runtime.UserNS{HostID: host, Size: Size}, nil
}

// Confine runs spec, a container of app, in app's user namespace: its
// layers idmapped (or shifted copies), the sources of its bind mounts
// owned by the range, its capabilities AppCapabilities.
func (c *Confiner) Confine(ctx context.Context, app string, spec *runtime.Spec) error {
	ns, err := c.Range(ctx, app)
	if err != nil {
		return err
	}
	lower, err := c.mapped(spec.Layers, ns.HostID)
	if err != nil {
		return fmt.Errorf("app %q: layers: %w", app, err)
	}
	for _, m := range spec.Mounts {
		if m.Type != "" && m.Type != "bind" {
			continue
		}
		if err := Own(m.Source, ns.HostID); err != nil {
			return fmt.Errorf("app %q: mount %s: %w", app, m.Destination, err)
		}
	}
	spec.Layers, spec.UserNS = lower, &ns
	spec.Capabilities = append([]string(nil), AppCapabilities...)
	return nil
}

// Release gives back app's range once the app is deleted, with its
// idmapped layers and shifted copies.
func (c *Confiner) Release(ctx context.Context, app string) error {
	ns, err := c.lookup(ctx, app)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.layers.drop(ns); err != nil {
		c.o.Logger.Warn("userns: layers of a released range", "app", app, "err", err)
	}
	c.mu.Lock()
	delete(c.ranges, app)
	c.mu.Unlock()
	return store.ReleaseIDRange(ctx, c.o.Store, app)
}

// lookup returns the first host id of app's range, without claiming one.
func (c *Confiner) lookup(ctx context.Context, app string) (uint32, error) {
	c.mu.Lock()
	host, ok := c.ranges[app]
	c.mu.Unlock()
	if ok {
		return host, nil
	}
	i, err := store.IDRangeOf(ctx, c.o.Store, app)
	if err != nil {
		return 0, err
	}
	return uint32(Base + uint64(i)*Size), nil
}

// rangeDir is the folder of a range's layers under dir.
func rangeDir(dir string, host uint32) string {
	return filepath.Join(dir, fmt.Sprint(host))
}

// mapped is layers.mapped, refused once the confiner is closed: a
// replica made while the daemon stops would leave its layers mounted.
func (c *Confiner) mapped(src []string, host uint32) ([]string, error) {
	c.closing.RLock()
	defer c.closing.RUnlock()
	if c.closed {
		return nil, errors.New("the daemon is stopping")
	}
	return c.layers.mapped(src, host)
}

// Close unmounts the idmapped layers, once those being mounted are: the
// overlays of running replicas keep theirs, and the next daemon mounts
// them again as it needs them. No layer is mapped after it.
func (c *Confiner) Close() error {
	c.closing.Lock()
	defer c.closing.Unlock()
	c.closed = true
	return c.layers.unmountAll()
}
