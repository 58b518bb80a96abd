package network

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Egress is where a bridge attachment's traffic may leave the host.
type Egress string

// The egress policies.
const (
	// EgressPublic reaches any address but the host's and the blocked
	// ranges (private, CGNAT, loopback, link-local, multicast, reserved).
	EgressPublic Egress = "public"
	// EgressNone reaches nothing beyond the bridge.
	EgressNone Egress = "none"
)

// Policy is what the holder of a Bridge attachment may reach. Every
// attachment, with a policy or without, reaches the host only at the
// ports AllowHostPort named, and no other attachment on the bridge unless
// a policy allows it; without a policy its egress is public.
type Policy struct {
	// App is the app whose replica holds the attachment: the name other
	// policies' Allow lists match.
	App string `json:"app"`
	// Egress is EgressPublic ("" too) or EgressNone.
	Egress Egress `json:"egress,omitempty"`
	// Allow names the apps whose attachments this one may reach on any
	// port (connections the other way stay refused).
	Allow []string `json:"allow,omitempty"`
	// PeerPorts are TCP ports of a stateful app's replicas: this one
	// reaches them at any address (its peers, on other nodes), and, with
	// Publish, they are published on Publish, the node's address: a
	// connection there to one of them goes to this attachment, same port.
	// A port of an address is published for one attachment at a time.
	PeerPorts []uint16   `json:"peer_ports,omitempty"`
	Publish   netip.Addr `json:"publish,omitzero"`
}

// elements are the peer ports' elements of the table for m.
func (m member) peerElements() tableState {
	var s tableState
	for _, port := range m.PeerPorts {
		s.peerOut = append(s.peerOut, peerPort{m.IP, port})
		if m.Publish.Is4() {
			s.peerDNAT = append(s.peerDNAT, publish{on: peerPort{m.Publish, port}, replica: m.IP})
		}
	}
	return s
}

// member is an attachment with a policy, as kept in its file.
type member struct {
	IP netip.Addr `json:"ip"`
	Policy
}

// policy keeps the nftables table of the bridge in step with the
// attachments' policies. Each policy is also a file under dir, from which a
// restarted daemon rebuilds the table.
// dir is beside StateDir (StateDir + "-policy"), on the same file system
// (a tmpfs such as /run: gone with the namespaces at a reboot).
type policy struct {
	br  bridgeSet
	dir string
	log *slog.Logger

	// watch isolates ports as the kernel tells of them (portwatch.go);
	// nil when link notifications could not be had: every guard's pass
	// then checks every port.
	watch *portWatch

	mu       sync.Mutex
	t        *nftTable
	members  map[string]member // by namespace name
	ports    map[uint16]bool
	rebuilds uint64
	sweeps   uint64 // passes over every bridge port (prepare)
	// want is state() as of the last change of members or ports, nil
	// after one: the guard's pass does not work it out again (it takes
	// time in the square of the members).
	want *tableState
}

// openPolicy loads the policies of the namespaces still in stateDir,
// builds the bridges' table and isolates the bridges' ports.
func openPolicy(br bridgeSet, stateDir string, log *slog.Logger) (*policy, error) {
	p := &policy{br: br, dir: stateDir + "-policy", log: log,
		members: map[string]member{}, ports: map[uint16]bool{}}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, fmt.Errorf("network policy dir: %w", err)
	}
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("network policy dir: %w", err)
	}
	for _, de := range ents {
		name := de.Name()
		file := filepath.Join(p.dir, name)
		if !nsName().MatchString(name) || !isNetNS(filepath.Join(stateDir, name)) {
			os.Remove(file)
			continue
		}
		b, err := os.ReadFile(file)
		var mb member
		if err == nil {
			err = json.Unmarshal(b, &mb)
		}
		if err != nil || !mb.IP.Is4() {
			// The namespace keeps the default policy, the least it may
			// have; say so.
			log.Warn("network policy: unreadable policy file, default policy applies", "file", file, "err", err)
			continue
		}
		p.members[name] = mb
	}
	if p.t, err = newNFTTable(br.names[0], br.names, br.subnet, br.bits); err != nil {
		return nil, fmt.Errorf("network policy: %w", err)
	}
	if err := p.t.build(p.state()); err != nil {
		p.t.close()
		return nil, fmt.Errorf("network policy: %w", err)
	}
	// Subscribed before the sweep: a port added meanwhile is told.
	if p.watch, err = openPortWatch(br.names, log); err != nil {
		log.Warn("network policy: no link notifications; the guard checks every bridge port each pass", "err", err)
	}
	if err := p.prepare(); err != nil {
		if p.watch != nil {
			p.watch.f.Close()
		}
		p.t.close()
		return nil, fmt.Errorf("network policy: %w", err)
	}
	if p.watch != nil {
		go p.watch.run()
	}
	return p, nil
}

// state is what the table must hold for the current members and ports.
func (p *policy) state() tableState {
	var s tableState
	for name, m := range p.members {
		if m.Egress == EgressNone {
			s.egressNone = append(s.egressNone, m.IP)
		}
		s.pairs = append(s.pairs, p.pairsFrom(name, m)...)
		pe := m.peerElements()
		s.peerOut = append(s.peerOut, pe.peerOut...)
		s.peerDNAT = append(s.peerDNAT, pe.peerDNAT...)
	}
	for port := range p.ports {
		s.ports = append(s.ports, port)
	}
	return s
}

// pairsFrom are the pairs m may open connections over: to each other
// member of an app m allows.
func (p *policy) pairsFrom(name string, m member) [][2]netip.Addr {
	var out [][2]netip.Addr
	for n, o := range p.members {
		if n != name && o.IP != m.IP && slices.Contains(m.Allow, o.App) {
			out = append(out, [2]netip.Addr{m.IP, o.IP})
		}
	}
	return out
}

// pairsOf are the pairs in which m stands, either way.
func (p *policy) pairsOf(name string, m member) [][2]netip.Addr {
	out := p.pairsFrom(name, m)
	for n, o := range p.members {
		if n != name && o.IP != m.IP && slices.Contains(o.Allow, m.App) {
			out = append(out, [2]netip.Addr{o.IP, m.IP})
		}
	}
	return out
}

// set gives namespace name the policy of m, replacing any it had.
func (p *policy) set(name string, m member) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Checked before the old policy goes: a refused policy leaves the
	// attachment the one it had.
	if err := p.publishedLocked(name, m); err != nil {
		return err
	}
	old, had := p.members[name]
	if had {
		if err := p.dropLocked(name); err != nil {
			return err
		}
	}
	if err := p.addLocked(name, m, b); err != nil {
		if had {
			if ob, merr := json.Marshal(old); merr != nil {
				err = errors.Join(err, merr)
			} else if rerr := p.addLocked(name, old, ob); rerr != nil {
				// The old elements could not be put back: the member
				// stays and the rebuild makes the table what it must be.
				p.members[name] = old
				p.want = nil
				err = errors.Join(err, writeFileAtomic(filepath.Join(p.dir, name), ob),
					p.rebuildLocked(fmt.Sprintf("restoring the policy of %s failed (%v)", name, rerr)))
			}
		}
		return err
	}
	return nil
}

// addLocked gives namespace name, which has no policy, the policy of m
// (b is m as JSON).
func (p *policy) addLocked(name string, m member, b []byte) error {
	if err := writeFileAtomic(filepath.Join(p.dir, name), b); err != nil {
		return fmt.Errorf("network policy of %s: %w", name, err)
	}
	add := m.peerElements()
	if m.Egress == EgressNone {
		add.egressNone = []netip.Addr{m.IP}
	}
	add.pairs = p.pairsOf(name, m)
	p.members[name] = m
	p.want = nil
	if err := p.t.change(add, tableState{}); err != nil {
		delete(p.members, name)
		p.want = nil
		os.Remove(filepath.Join(p.dir, name))
		return fmt.Errorf("network policy of %s: %w", name, err)
	}
	return nil
}

// publishedLocked refuses m when another member publishes one of its peer
// ports on the same address.
func (p *policy) publishedLocked(name string, m member) error {
	if !m.Publish.IsValid() {
		return nil
	}
	for other, o := range p.members {
		if other == name || o.Publish != m.Publish {
			continue
		}
		for _, port := range m.PeerPorts {
			if slices.Contains(o.PeerPorts, port) {
				return fmt.Errorf("peer port %d of %s is published for %s (app %s) already: %w", port, m.Publish, o.IP, o.App, errdefs.ErrConflict)
			}
		}
	}
	return nil
}

// drop removes namespace name's policy and the table's elements for it.
func (p *policy) drop(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropLocked(name)
}

func (p *policy) dropLocked(name string) error {
	m, ok := p.members[name]
	if !ok {
		return nil
	}
	del := m.peerElements()
	if m.Egress == EgressNone {
		del.egressNone = []netip.Addr{m.IP}
	}
	del.pairs = p.pairsOf(name, m)
	delete(p.members, name)
	p.want = nil
	os.Remove(filepath.Join(p.dir, name))
	if err := p.t.change(tableState{}, del); err != nil {
		// The elements may be gone already (a table flushed from
		// outside): the rebuild makes the table what it must be.
		return p.rebuildLocked(fmt.Sprintf("removing the policy of %s failed (%v)", name, err))
	}
	return nil
}

// allowPort lets the bridge reach the host's TCP port.
func (p *policy) allowPort(port uint16) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ports[port] {
		return nil
	}
	if err := p.t.change(tableState{ports: []uint16{port}}, tableState{}); err != nil {
		return fmt.Errorf("network policy: host port %d: %w", port, err)
	}
	p.ports[port] = true
	p.want = nil
	return nil
}

// heal rebuilds the table when it is not what it must be (someone flushed
// the ruleset, deleted the table or emptied a set), and gives the bridges
// their settings. Their ports are the watch's to isolate: heal checks each
// only when the watch lost notifications or has none.
func (p *policy) heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if p.watch == nil || p.watch.sweep() {
		err = p.prepare()
	} else {
		for _, b := range p.br.names {
			err = errors.Join(err, bridgeSettings(b))
		}
		for _, port := range p.watch.next(rotatePorts) {
			if !p.watch.bridges[onBridge(port)] {
				p.watch.remove(port) // gone, or on none of the set's bridges now
				continue
			}
			err = errors.Join(err, isolatePort(port))
		}
	}
	if p.want == nil {
		st := p.state()
		p.want = &st
	}
	ok, cerr := p.t.check(*p.want)
	if cerr != nil {
		return errors.Join(err, cerr)
	}
	if !ok {
		err = errors.Join(err, p.rebuildLocked("the table was changed from outside"))
	}
	return err
}

func (p *policy) rebuildLocked(why string) error {
	p.rebuilds++
	p.log.Warn("network policy: rebuilding the nftables table", "table", "inet "+p.t.name, "why", why)
	return p.t.build(p.state())
}

// close removes the table when remove is set, and closes the connection.
func (p *policy) close(remove bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if remove {
		err = p.t.remove()
		os.Remove(p.dir)
	}
	p.t.close()
	if p.watch != nil {
		p.watch.close()
	}
	return err
}

// SetPolicy gives a, a Bridge attachment this Manager handed out, the
// policy p: the table changes at once (one netlink batch) and the policy
// is kept until a is released, across a restart of the daemon too.
func (m *Manager) SetPolicy(a *Attachment, p Policy) error {
	if a == nil || a.Mode != Bridge {
		return errdefs.Invalid("attachment", "a policy is for bridge attachments")
	}
	switch p.Egress {
	case "":
		p.Egress = EgressPublic
	case EgressPublic, EgressNone:
	default:
		return errdefs.Invalid("egress", "%q is not %q or %q", p.Egress, EgressPublic, EgressNone)
	}
	ip, ok := netip.AddrFromSlice(a.IP.To4())
	if !ok {
		return errdefs.Invalid("attachment", "%s has no IPv4 address", a.ID)
	}
	name, _, err := m.parsePath(a.NSPath)
	if err != nil {
		return err
	}
	m.mu.Lock()
	e := m.owned[name]
	held := e != nil && e.container != "" && (a.holder == "" || a.holder == e.container)
	m.mu.Unlock()
	if !held {
		return fmt.Errorf("netns %s: not held by %s: %w", a.NSPath, a.holder, errdefs.ErrConflict)
	}
	if p.Publish.IsValid() && !p.Publish.Is4() {
		return errdefs.Invalid("publish", "%s is not an IPv4 address", p.Publish)
	}
	p.Allow = slices.Clone(p.Allow)
	p.PeerPorts = slices.Clone(p.PeerPorts)
	return m.pol.set(name, member{IP: ip, Policy: p})
}

// AllowHostPort lets every attachment on the bridges reach TCP port on the
// host (the self API's, the proxy's). Ports are not kept across a
// restart: the daemon names them again when it listens.
func (m *Manager) AllowHostPort(port int) error {
	if port < 1 || port > 65535 {
		return errdefs.Invalid("port", "%d is not a port number", port)
	}
	return m.pol.allowPort(uint16(port))
}

// prepare runs prepareBridge on every bridge of the set.
func (p *policy) prepare() error {
	p.sweeps++
	var errs []error
	for _, b := range p.br.names {
		ports, err := prepareBridge(b)
		errs = append(errs, err)
		if p.watch != nil {
			for _, port := range ports {
				p.watch.add(port)
			}
		}
	}
	return errors.Join(errs...)
}

// prepareBridge sets up the bridge, once it exists, for the policy, and
// returns its ports:
// every port isolated (an attachment's frames reach the host, never
// another port), and the host answering the ARP requests of one port for
// another's address (private VLAN proxy ARP, at once, not after the
// default random delay), so that traffic between attachments goes through
// the host's forward path, where the table decides.
func prepareBridge(bridge string) ([]string, error) {
	dir := filepath.Join("/sys/class/net", bridge)
	if _, err := os.Stat(dir); err != nil {
		return nil, nil // made with the first attachment
	}
	errs := []error{bridgeSettings(bridge)}
	ports, err := os.ReadDir(filepath.Join(dir, "brif"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("bridge %s: ports: %w", bridge, err))
	}
	names := make([]string, 0, len(ports))
	for _, port := range ports {
		names = append(names, port.Name())
		errs = append(errs, isolatePort(port.Name()))
	}
	return names, errors.Join(errs...)
}

// bridgeSettings gives the bridge, once it exists, prepareBridge's
// settings but for its ports'.
func bridgeSettings(bridge string) error {
	err := writeSysctl(filepath.Join("/proc/sys/net/ipv4/conf", bridge, "proxy_arp_pvlan"), "1")
	if errors.Is(err, os.ErrNotExist) {
		return nil // made with the first attachment
	}
	return errors.Join(err, writeSysctl(filepath.Join("/proc/sys/net/ipv4/neigh", bridge, "proxy_delay"), "0"))
}

// onBridge returns the bridge port is on, "" when none (or no port).
func onBridge(port string) string {
	dst, err := os.Readlink(filepath.Join("/sys/class/net", port, "master"))
	if err != nil {
		return ""
	}
	return filepath.Base(dst)
}

// isolatePort sets the bridge port flag isolated on the host side of an
// attachment's veth pair: the bridge forwards nothing between two
// isolated ports.
func isolatePort(port string) error {
	err := writeSysctl(filepath.Join("/sys/class/net", port, "brport/isolated"), "1")
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join("/sys/class/net", port, "brport")); serr == nil {
			return fmt.Errorf("bridge port %s: this kernel cannot isolate bridge ports (Linux 4.18 or later can): %w", port, err)
		}
		return nil // the port went meanwhile
	}
	return err
}

// writeSysctl writes value to a /proc/sys or /sys file unless it holds it
// already.
func writeSysctl(file, value string) error {
	if b, err := os.ReadFile(file); err == nil && strings.TrimSpace(string(b)) == value {
		return nil
	}
	if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}
