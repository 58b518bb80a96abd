package network

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Recycle gives the None namespace of a back to the pool when it is as the
// pool makes it, and otherwise destroys it as Release does. The caller must
// have ended every process that used it (the container is deleted): only
// what outlives them, such as a TCP connection in TIME_WAIT, is looked for.
//
// Clean means no socket of any family or state, TIME_WAIT included, by the
// namespace's own counters, no IP fragment being reassembled, and no
// interface but lo, which is up. The check runs on a thread that joins the
// namespace (about 0.1 ms). Bridge namespaces, namespaces the Manager does
// not own (as after a restart) and those that do not fit in a full pool
// are destroyed.
//
// A clean namespace goes on top of the pool, so the next Acquire takes it.
// When the pool is full it takes the place of a namespace the pool made and
// no one has used; that one is destroyed. A namespace that came back through
// Recycle is expected back while it is out: the pool does not replace it, as
// long as one namespace is left ready (see short).
func (m *Manager) Recycle(ctx context.Context, a *Attachment) error {
	name, mode, e, err := m.detach(a)
	if err != nil {
		return err
	}
	m.mu.Lock()
	try := e != nil && mode == None && !m.closed && m.poolTarget(None) > 0
	if try {
		m.checking++ // counted as ready meanwhile (see short)
	}
	m.mu.Unlock()
	defer m.refill()

	if try {
		err := checkEmpty(e.path)
		kept, evicted := m.putBack(e, err == nil)
		if err != nil {
			m.log.Debug("network: namespace not reused", "netns", name, "why", err)
		}
		if kept {
			if evicted != nil {
				return m.destroy(ctx, evicted.name, evicted.mode)
			}
			return nil
		}
	}
	return m.destroy(ctx, name, mode)
}

// putBack ends the check of e and, if it was found clean, puts it on top
// of the None pool. In a full pool it takes the place of the oldest
// namespace no container has used, which the caller destroys; when every
// pooled one has been used already, e is not kept.
func (m *Manager) putBack(e *entry, clean bool) (kept bool, evicted *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checking--
	if !clean {
		m.stats.Dirty++
		return false, nil
	}
	if m.closed {
		return false, nil
	}
	ready := m.pool[None]
	if len(ready) >= m.poolTarget(None) {
		i := slices.IndexFunc(ready, func(p *entry) bool { return !p.reused })
		if i < 0 {
			return false, nil
		}
		evicted = ready[i]
		ready = slices.Delete(ready, i, i+1)
	}
	e.reused = true
	m.pool[None] = append(ready, e)
	m.stats.Reused++
	return true, evicted
}

// socketCounts are the files of /proc/<tid>/net with the namespace's own
// socket counters. The tables beside them (tcp, udp, ...) say the same
// entry by entry, but reading tcp or tcp6 walks the host's whole TCP hash
// table, some milliseconds each, which costs more than a new namespace.
var socketCounts = []string{"sockstat", "sockstat6"}

// checkEmpty returns why the namespace at path is not as createNetNS
// leaves it, or nil when it holds no socket and no interface but lo, up.
func checkEmpty(path string) error {
	return withNetNS(path, func() error {
		for _, f := range socketCounts {
			b, err := os.ReadFile("/proc/thread-self/net/" + f)
			if errors.Is(err, fs.ErrNotExist) {
				continue // IPv6 off
			}
			if err != nil {
				return err
			}
			if err := noSockets(f, b); err != nil {
				return err
			}
		}
		return onlyLoopbackUp()
	})
}

// onlyLoopbackUp checks that the calling thread's namespace has no
// interface but lo and that lo is up. It opens no netlink socket: a closed
// one is counted in "sockets: used" until an RCU grace period has passed,
// so the next check would find it.
func onlyLoopbackUp() error {
	b, err := os.ReadFile("/proc/thread-self/net/dev")
	if err != nil {
		return err
	}
	if err := onlyLoopback(b); err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo: get flags: %w", err)
	}
	if ifr.Uint16()&unix.IFF_UP == 0 {
		return errors.New("lo is down")
	}
	return nil
}

// noSockets checks the counters of a sockstat file, lines such as
// "TCP: inuse 0 orphan 0 tw 0 alloc 3 mem 70". Those that count what is
// in the reader's namespace must be 0: "sockets: used" (every socket a
// process opened there, of any family, bound or not, until it is freed),
// "inuse" per protocol (sockets bound or connected; for FRAG, datagrams
// being reassembled) and TCP's "tw" (connections in TIME_WAIT, IPv6 ones
// too). The others (orphan, alloc, mem) are the host's.
// onlyLoopback checks that a net/dev file lists no interface but lo.
func onlyLoopback(dev []byte) error {
	var names []string
	for line := range strings.Lines(string(dev)) {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			names = append(names, strings.TrimSpace(name))
		}
	}
	if len(names) != 1 || names[0] != "lo" {
		return fmt.Errorf("interfaces %v, want lo only", names)
	}
	return nil
}

// CheckEmptyOf says why the None namespace of a process is not as the
// pool makes it (see Recycle), or nil: for a namespace kept by its holder
// from one use to the next, as a reusable job sandbox's is, with no
// process of the last use left but this one. proc is the process's /proc
// directory, opened while it ran: never another process's, and once the
// process is gone its files cannot be read. The namespace's counters and
// interfaces are read through it, no thread joining the namespace; lo's
// flags are not looked at, since without CAP_NET_ADMIN over a namespace
// the daemon made no process in it can change its interfaces.
func CheckEmptyOf(proc *os.Root) error {
	for _, f := range socketCounts {
		b, err := proc.ReadFile("net/" + f)
		if errors.Is(err, fs.ErrNotExist) && f != socketCounts[0] {
			continue // IPv6 off
		}
		if err != nil {
			return err
		}
		if err := noSockets(f, b); err != nil {
			return err
		}
	}
	b, err := proc.ReadFile("net/dev")
	if err != nil {
		return err
	}
	return onlyLoopback(b)
}

func noSockets(name string, b []byte) error {
	for line := range strings.Lines(string(b)) {
		proto, rest, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("%s: cannot parse %q", name, line)
		}
		f := strings.Fields(rest)
		for i := 0; i+1 < len(f); i += 2 {
			switch f[i] {
			case "used", "inuse", "tw":
				if f[i+1] != "0" {
					return fmt.Errorf("%s: %s %s %s", name, proto, f[i], f[i+1])
				}
			}
		}
	}
	return nil
}
