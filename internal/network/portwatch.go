package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// portWatch isolates the ports of the set's bridges as the kernel tells
// of them (netlink link notifications, RTNLGRP_LINK): a port added, or a
// port whose isolated flag was cleared through sysfs or `bridge link`, is
// isolated again at once. A flag cleared through the port's link info
// (`ip link set … type bridge_slave isolated off`) is told of by no
// notification: the guard checks rotatePorts of the ports it keeps a
// pass, in turn, so its pass costs the same whatever their number. It
// sweeps every port only when notifications were lost (the socket's
// buffer overran) or the watch ended.
type portWatch struct {
	f       *os.File
	bridges map[string]bool
	log     *slog.Logger
	done    chan struct{}
	once    sync.Once
	// lost is set when notifications may have been missed; dead once the
	// watch ended on an error.
	lost atomic.Bool
	dead atomic.Bool
	// isolated counts the ports it isolated, for tests.
	isolated atomic.Int64

	index map[int32]string // the bridges' interface indexes; the loop's own

	mu     sync.Mutex
	ring   []string       // the bridges' ports, in the guard's turn
	pos    map[string]int // each one's place in ring
	cursor int            // the next in turn
}

// rotatePorts is how many ports the guard checks a pass when the
// notifications are whole: at the default 2 s, 8 a second.
const rotatePorts = 16

// add keeps port for the guard's rotation.
func (w *portWatch) add(port string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.pos[port]; !ok {
		w.pos[port] = len(w.ring)
		w.ring = append(w.ring, port)
	}
}

// remove drops port from the rotation.
func (w *portWatch) remove(port string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, ok := w.pos[port]
	if !ok {
		return
	}
	last := len(w.ring) - 1
	w.ring[i] = w.ring[last]
	w.pos[w.ring[i]] = i
	w.ring = w.ring[:last]
	delete(w.pos, port)
}

// next returns the next k ports in turn (fewer when fewer are kept).
func (w *portWatch) next(k int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	k = min(k, len(w.ring))
	out := make([]string, 0, k)
	for range k {
		if w.cursor >= len(w.ring) {
			w.cursor = 0
		}
		out = append(out, w.ring[w.cursor])
		w.cursor++
	}
	return out
}

// nlaTypeMask is an attribute's type without its flags.
const nlaTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

// openPortWatch subscribes to link notifications. Call it before the
// first sweep, so that no port added meanwhile is missed; run starts the
// loop.
func openPortWatch(bridges []string, log *slog.Logger) (*portWatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("link notifications: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (unix.RTNLGRP_LINK - 1)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("link notifications: %w", err)
	}
	// A burst of starts makes many notifications: a large buffer, beyond
	// rmem_max where allowed (root).
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	w := &portWatch{f: os.NewFile(uintptr(fd), "netlink link notifications"), bridges: map[string]bool{},
		log: log, done: make(chan struct{}), index: map[int32]string{}, pos: map[string]int{}}
	for _, b := range bridges {
		w.bridges[b] = true
		if ifi, err := net.InterfaceByName(b); err == nil {
			w.index[int32(ifi.Index)] = b
		}
	}
	return w, nil
}

// run handles notifications until close.
func (w *portWatch) run() {
	defer close(w.done)
	buf := make([]byte, 1<<16)
	for {
		n, err := w.f.Read(buf)
		switch {
		case errors.Is(err, unix.ENOBUFS):
			w.lost.Store(true)
			continue
		case errors.Is(err, os.ErrClosed):
			return
		case err != nil:
			w.log.Warn("network policy: link notifications ended; the guard checks every bridge port", "err", err)
			w.dead.Store(true)
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			w.lost.Store(true)
			continue
		}
		for i := range msgs {
			w.handle(&msgs[i])
		}
	}
}

// handle takes one notification: a bridge of the set is noted (its index)
// and given its settings, a port of one is isolated unless the
// notification says it is.
func (w *portWatch) handle(m *syscall.NetlinkMessage) {
	if m.Header.Type != unix.RTM_NEWLINK && m.Header.Type != unix.RTM_DELLINK || len(m.Data) < unix.SizeofIfInfomsg {
		return
	}
	ne := binary.NativeEndian
	family, index := m.Data[0], int32(ne.Uint32(m.Data[4:]))
	attrs, err := syscall.ParseNetlinkRouteAttr(m)
	if err != nil {
		return
	}
	var name string
	master, isolated := int32(0), -1
	for _, a := range attrs {
		switch a.Attr.Type & nlaTypeMask {
		case unix.IFLA_IFNAME:
			name = unix.ByteSliceToString(a.Value)
		case unix.IFLA_MASTER:
			if len(a.Value) >= 4 {
				master = int32(ne.Uint32(a.Value))
			}
		case unix.IFLA_PROTINFO:
			isolated = brportIsolated(a.Value)
		}
	}
	if w.bridges[name] {
		if m.Header.Type == unix.RTM_DELLINK {
			delete(w.index, index)
			return
		}
		w.index[index] = name
		if family == unix.AF_UNSPEC {
			if err := bridgeSettings(name); err != nil {
				w.log.Warn("network policy: bridge settings", "bridge", name, "err", err)
			}
		}
		return
	}
	switch {
	case name == "":
		return
	case m.Header.Type == unix.RTM_DELLINK:
		w.remove(name)
		return
	case w.index[master] == "":
		if family == unix.AF_UNSPEC { // its master, if any, told: not one of the set
			w.remove(name)
		}
		return
	}
	w.add(name)
	if isolated == 1 {
		return
	}
	if err := isolatePort(name); err != nil {
		w.log.Warn("network policy: isolate a bridge port", "port", name, "err", err)
		return
	}
	w.isolated.Add(1)
}

// brportIsolated reads IFLA_BRPORT_ISOLATED from the attributes nested in
// IFLA_PROTINFO: 0 or 1, or -1 when absent.
func brportIsolated(b []byte) int {
	ne := binary.NativeEndian
	for len(b) >= unix.SizeofRtAttr {
		l := int(ne.Uint16(b))
		if l < unix.SizeofRtAttr || l > len(b) {
			return -1
		}
		if ne.Uint16(b[2:])&nlaTypeMask == unix.IFLA_BRPORT_ISOLATED && l > unix.SizeofRtAttr {
			return int(b[unix.SizeofRtAttr])
		}
		l = (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if l > len(b) {
			return -1
		}
		b = b[l:]
	}
	return -1
}

// sweep reports whether the guard must check every port: notifications
// were lost since the last call, or the watch ended.
func (w *portWatch) sweep() bool {
	return w.dead.Load() || w.lost.Swap(false)
}

// close ends the watch.
func (w *portWatch) close() {
	w.once.Do(func() { w.f.Close() })
	<-w.done
}
