package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Restore reconciles StateDir with the daemon's records after a restart.
// inUse maps container IDs to the namespace paths their records hold; those
// namespaces are kept and become Lookup-able. Every other namespace file in
// StateDir (pool leftovers, namespaces of containers that are gone) is
// detached and removed, and so is every CNI attachment and host-local
// address reservation that no kept namespace accounts for, as left by a
// reboot that emptied StateDir. Namespaces this Manager made since New are
// left alone. Restore is idempotent.
func (m *Manager) Restore(ctx context.Context, inUse map[string]string) error {
	keep := map[string]string{} // namespace name → container ID
	for id, path := range inUse {
		name, _, err := m.parsePath(path)
		if err != nil {
			return fmt.Errorf("container %q: %w", id, err)
		}
		keep[name] = id
	}

	ents, err := os.ReadDir(m.o.StateDir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	var errs []error
	present := map[string]bool{}
	for _, de := range ents {
		name := de.Name()
		present[name] = true
		if de.IsDir() || m.isOwned(name) {
			continue
		}
		if id, ok := keep[name]; ok && nsName().MatchString(name) {
			errs = append(errs, m.adopt(name, id))
			continue
		}
		mode := None
		if strings.HasPrefix(name, string(Bridge)+"-") {
			mode = Bridge
		}
		m.log.Info("network: removing orphan namespace", "netns", name)
		errs = append(errs, m.destroy(ctx, name, mode))
	}
	for name, id := range keep {
		if !present[name] {
			m.log.Warn("network: namespace of container is gone", "container", id, "netns", name)
		}
	}

	// Attachments whose namespace vanished without a DEL.
	stale, err := m.cni.attachments()
	errs = append(errs, err)
	for id, br := range m.reservations() {
		if _, ok := stale[id]; !ok {
			stale[id] = br
		}
	}
	for id, br := range stale {
		if _, kept := keep[id]; kept || m.isOwned(id) {
			continue
		}
		m.log.Info("network: removing stale cni attachment", "id", id, "bridge", m.br.names[br])
		errs = append(errs, m.cni.del(ctx, br, id, ""))
	}
	return errors.Join(errs...)
}

// isOwned reports whether name is a namespace this Manager made or adopted.
func (m *Manager) isOwned(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.owned[name]
	return ok
}

// adopt records the existing namespace name as held by containerID.
func (m *Manager) adopt(name, containerID string) error {
	_, mode, _ := m.parsePath(filepath.Join(m.o.StateDir, name))
	e := &entry{name: name, mode: mode, path: filepath.Join(m.o.StateDir, name), container: containerID}
	if mode == Bridge {
		br, ip, gw, err := m.cni.cached(name, e.path)
		if err != nil {
			m.log.Warn("network: adopted namespace has no cached address", "netns", name, "err", err)
		}
		e.br, e.ip, e.gw = br, ip, gw
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.byContainer[containerID]; old != nil && old.name != name {
		return fmt.Errorf("container %q: holds %s already, not %s: %w", containerID, old.path, e.path, errdefs.ErrConflict)
	}
	m.owned[name] = e
	if e.mode == Bridge && e.br >= 0 {
		m.ports[e.br]++
	}
	m.byContainer[containerID] = e
	return nil
}

// reservations maps the container IDs holding an address in host-local's
// data dirs to their bridge.
func (m *Manager) reservations() map[string]int {
	ids := map[string]int{}
	for br, n := range m.cni.nets {
		for _, id := range reserved(n.ipam) {
			ids[id] = br
		}
	}
	return ids
}
