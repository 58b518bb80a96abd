package network

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// fill keeps the pool at its target size until Close. It makes one
// namespace at a time so that the background work stays modest, and backs
// off after a failure.
func (m *Manager) fill() {
	defer close(m.done)
	backoff := time.Second
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		}
		failed := false
		for _, mode := range modes {
			for !failed && m.short(mode) {
				select {
				case <-m.stop:
					return
				default:
				}
				ctx, cancel := context.WithCancel(withOpLimit(context.Background(), opTimeout))
				e, err := m.create(ctx, mode)
				cancel()
				if err != nil {
					m.mu.Lock()
					m.stats.FillErrors++
					m.mu.Unlock()
					m.log.Warn("network pool: create namespace", "mode", mode, "err", err, "retry_in", backoff)
					failed = true
					break
				}
				if !m.addFresh(e) {
					ctx, cancel := context.WithCancel(withOpLimit(context.Background(), opTimeout))
					if err := m.destroy(ctx, e.name, e.mode); err != nil {
						m.log.Warn("network pool: destroy surplus namespace", "netns", e.name, "err", err)
					}
					cancel()
				}
				backoff = time.Second
			}
		}
		if failed {
			select {
			case <-m.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
			m.refill()
		}
	}
}

// addFresh puts e, just made, at the bottom of the pool of its mode, below
// namespaces Recycle put back, which are used first. It reports false when
// the pool filled up meanwhile.
func (m *Manager) addFresh(e *entry) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pool[e.mode]) >= m.poolTarget(e.mode) {
		return false
	}
	m.pool[e.mode] = slices.Insert(m.pool[e.mode], 0, e)
	return true
}

// short reports whether the pool of mode is below its target. Namespaces
// Recycle is checking, and those out that came back through Recycle
// before, count as ready, since they are likely to come back (again):
// making a replacement for each would leave no room for them. One
// namespace is always kept ready.
func (m *Manager) short(mode Mode) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ready, want := len(m.pool[mode]), m.poolTarget(mode)
	if ready > 0 && mode == None {
		want -= m.checking
		for _, e := range m.byContainer {
			if e != nil && e.mode == mode && e.reused {
				want--
			}
		}
	}
	return ready < want
}

// Close stops the pool filler and destroys every pooled namespace.
// Acquired namespaces stay, for containers that outlive the daemon. When
// none is left, the bridge and the StateDir bind mount go too. Acquire
// fails after Close.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	<-m.guardDone

	m.mu.Lock()
	var pooled []*entry
	for _, mode := range modes {
		pooled = append(pooled, m.pool[mode]...)
		m.pool[mode] = nil
	}
	m.mu.Unlock()
	var errs []error
	for _, e := range pooled {
		errs = append(errs, m.destroy(ctx, e.name, e.mode))
	}
	if err := errors.Join(errs...); err != nil {
		m.pol.close(false)
		return err
	}
	idle, err := m.removeIfIdle()
	// The policy table stays while namespaces do: their containers
	// outlive the daemon, and so do their rules.
	return errors.Join(err, m.pol.close(idle))
}

// guard checks the policy table every PolicyCheck until Close, and
// rebuilds it when it was changed from outside.
func (m *Manager) guard() {
	defer close(m.guardDone)
	for {
		t := m.o.Clock.NewTimer(m.o.PolicyCheck)
		select {
		case <-m.stop:
			t.Stop()
			return
		case <-t.C():
		}
		if err := m.pol.heal(); err != nil {
			m.log.Warn("network policy: check", "err", err)
		}
	}
}

// removeIfIdle deletes the bridges and unbinds StateDir once no namespace
// is left in StateDir, each bridge once no interface is left on it. It reports whether StateDir was idle.
func (m *Manager) removeIfIdle() (bool, error) {
	m.mu.Lock()
	busy := len(m.owned) > 0
	m.mu.Unlock()
	if busy {
		return false, nil
	}
	left, err := os.ReadDir(m.o.StateDir)
	if err != nil || len(left) > 0 {
		return false, nil
	}
	for _, b := range m.br.names {
		if ports, err := os.ReadDir("/sys/class/net/" + b + "/brif"); err == nil && len(ports) == 0 {
			if err := deleteLink(b); err != nil {
				return true, err
			}
		}
	}
	if m.boundDir {
		if err := unix.Unmount(m.o.StateDir, unix.MNT_DETACH); err != nil {
			return true, err
		}
	}
	return true, nil
}
