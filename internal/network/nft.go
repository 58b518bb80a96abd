package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The policy's nftables table: one of family inet for the bridges of a
// host, named after the first bridge, built by buildTable in one batch (so
// a rebuild replaces it atomically) and changed afterwards only through
// its sets' elements. <gateway> is any address whose host part in its
// bridge's slice is 1.
//
//	table inet <bridge> {
//	  set bridges { type ifname }                       # the bridges of the set
//	  set egress_none { type ipv4_addr }                # replicas without egress
//	  set pairs { type ipv4_addr . ipv4_addr }          # source . destination allowed between attachments
//	  set ports { type inet_service }                   # host TCP ports replicas reach (self API, proxy)
//	  set peer_out { type ipv4_addr . inet_service }    # a stateful replica and its peer ports, anywhere
//	  map peer_dnat { type ipv4_addr . inet_service : ipv4_addr }   # node address . peer port: replica
//	  chain peers_in { type nat hook prerouting priority dstnat        # published peer ports
//	    meta l4proto tcp dnat ip to ip daddr . tcp dport map @peer_dnat }
//	  chain peers_local { type nat hook output priority dstnat         # the same, from the host
//	    meta l4proto tcp dnat ip to ip daddr . tcp dport map @peer_dnat }
//	  chain prerouting { type filter hook prerouting priority filter   # bridge to bridge
//	    iifname @bridges ip daddr <subnet> ip daddr != <gateway> ct state established,related accept
//	    iifname @bridges ip daddr <subnet> ip daddr != <gateway> ip saddr . ip daddr @pairs accept
//	    iifname @bridges ip daddr <subnet> ip daddr != <gateway> reject with icmpx admin-prohibited }
//	  chain input { type filter hook input priority filter              # bridge to host
//	    iifname @bridges ct state established,related accept
//	    iifname @bridges meta l4proto tcp th dport @ports accept
//	    iifname @bridges reject with icmpx admin-prohibited }
//	  chain forward { type filter hook forward priority filter          # bridge to elsewhere
//	    ct state established,related accept
//	    iifname @bridges oifname @bridges accept         # decided in prerouting
//	    iifname != @bridges oifname @bridges ct status dnat meta l4proto tcp ip daddr . tcp dport @peer_out accept   # a published peer port
//	    iifname != @bridges oifname @bridges reject ...  # no way in but the host's own
//	    iifname @bridges meta nfproto != ipv4 reject ...  # fe80::/10 among them
//	    iifname @bridges ip daddr 169.254.0.0/16 reject ...
//	    iifname @bridges meta l4proto tcp ip saddr . tcp dport @peer_out accept
//	    iifname @bridges ip saddr @egress_none reject ...
//	    iifname @bridges ip daddr <each other of blocked> reject ... }
//	  chain postrouting { type nat hook postrouting priority srcnat - 1
//	    ip saddr <subnet> ip daddr <subnet> snat ip to ip saddr }
//	}
//
// The postrouting chain keeps the source of traffic between bridges: its
// identity mapping comes before the bridge plugin's masquerade (srcnat),
// which would otherwise give the source as the gateway of the
// destination's bridge, outside the destination's slice.
//
// Traffic between two attachments is decided before routing: the host
// forwards it back out of the bridge, and a packet forwarded out of the
// interface it came in on makes the kernel send the source an ICMP
// redirect first, which takes the rate-limit token the reject's ICMP error
// then needs (the refused connection would hang instead of failing).
const (
	setEgressNone = "egress_none"
	setPairs      = "pairs"
	setPorts      = "ports"
	chainPre      = "prerouting"
	chainInput    = "input"
	chainForward  = "forward"
	chainPost     = "postrouting"
	setBridges    = "bridges"
	setPeerOut    = "peer_out"
	mapPeerDNAT   = "peer_dnat"
	chainPeersIn  = "peers_in"
	chainPeersOut = "peers_local"
)

// blocked are the destinations public egress does not reach: this
// network, RFC 1918, CGNAT (RFC 6598), loopback, link-local (cloud
// metadata services among them), multicast and reserved space.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	linkLocal,
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// linkLocal is IPv4's link-local range, cloud metadata services' among
// them: rejected before the peer ports are accepted.
var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

// nftTable is the policy table of a host's bridges.
type nftTable struct {
	name    string
	bridges []string
	subnet  netip.Prefix // the bridges'
	bits    int          // of each bridge's slice
	conn    *nftables.Conn
	table   *nftables.Table
	sets    map[string]*nftables.Set
}

// tableState is what the table should hold.
type tableState struct {
	egressNone []netip.Addr
	pairs      [][2]netip.Addr
	ports      []uint16
	peerOut    []peerPort // stateful replicas' peer ports they may reach
	peerDNAT   []publish  // peer ports published on a node address
}

// peerPort is an address and a TCP port.
type peerPort struct {
	addr netip.Addr
	port uint16
}

// publish is a replica's peer port published on a node's address.
type publish struct {
	on      peerPort   // the node's address and the port
	replica netip.Addr // the replica's, where the port is the same
}

func newNFTTable(name string, bridges []string, subnet netip.Prefix, bits int) (*nftTable, error) {
	t := &nftTable{name: name, bridges: bridges, subnet: subnet, bits: bits, table: &nftables.Table{Name: name, Family: nftables.TableFamilyINet}}
	t.sets = map[string]*nftables.Set{
		setBridges:    {Table: t.table, Name: setBridges, KeyType: nftables.TypeIFName},
		setEgressNone: {Table: t.table, Name: setEgressNone, KeyType: nftables.TypeIPAddr},
		setPairs: {Table: t.table, Name: setPairs, Concatenation: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)},
		setPorts: {Table: t.table, Name: setPorts, KeyType: nftables.TypeInetService},
		setPeerOut: {Table: t.table, Name: setPeerOut, Concatenation: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)},
		mapPeerDNAT: {Table: t.table, Name: mapPeerDNAT, Concatenation: true, IsMap: true,
			KeyType:  nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService),
			DataType: nftables.TypeIPAddr},
	}
	if err := t.dial(); err != nil {
		return nil, err
	}
	return t, nil
}

// dial opens the netlink connection, loading nf_tables first where the
// kernel has it as a module that is not loaded (and does not load it on
// demand).
func (t *nftTable) dial() error {
	probe := func() error {
		c, err := nftables.New(nftables.AsLasting())
		if err != nil {
			return err
		}
		if _, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err != nil {
			c.CloseLasting()
			return err
		}
		t.conn = c
		return nil
	}
	err := probe()
	if err == nil {
		return nil
	}
	modprobe, lerr := exec.LookPath("modprobe")
	if lerr != nil {
		return fmt.Errorf("nftables (the kernel's nf_tables) is not available: %w; modprobe is not installed to load it (Debian package kmod)", err)
	}
	if out, merr := exec.Command(modprobe, "nf_tables").CombinedOutput(); merr != nil {
		return fmt.Errorf("nftables (the kernel's nf_tables) is not available: %w; modprobe nf_tables: %v: %s", err, merr, out)
	}
	if err := probe(); err != nil {
		return fmt.Errorf("nftables (the kernel's nf_tables) is not available, even after modprobe nf_tables: %w", err)
	}
	return nil
}

func (t *nftTable) close() {
	if t.conn != nil {
		t.conn.CloseLasting()
	}
}

// flush sends the batch; on failure the connection is made anew, so
// nothing of a failed batch stays queued on it.
func (t *nftTable) flush(what string) error {
	err := t.conn.Flush()
	if err == nil {
		return nil
	}
	t.conn.CloseLasting()
	if derr := t.dial(); derr != nil {
		err = errors.Join(err, derr)
	}
	return fmt.Errorf("nftables table inet %s: %s: %w", t.name, what, err)
}

// build replaces the table with one that holds s, in one batch.
func (t *nftTable) build(s tableState) error {
	c := t.conn
	c.AddTable(t.table) // so that the delete finds one
	c.DelTable(t.table)
	c.AddTable(t.table)
	for _, name := range []string{setBridges, setEgressNone, setPairs, setPorts, setPeerOut, mapPeerDNAT} {
		set := t.sets[name]
		set.ID = 0 // a fresh one for this batch
		if err := c.AddSet(set, t.elements(name, s)); err != nil {
			return fmt.Errorf("nftables set %s: %w", name, err)
		}
	}
	accept := func() expr.Any { return &expr.Verdict{Kind: expr.VerdictAccept} }
	reject := func() expr.Any {
		return &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
	}
	in, out := t.onBridge(expr.MetaKeyIIFNAME, false), t.onBridge(expr.MetaKeyOIFNAME, false)
	notIn := t.onBridge(expr.MetaKeyIIFNAME, true)
	pre := c.AddChain(&nftables.Chain{Name: chainPre, Table: t.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityFilter})
	input := c.AddChain(&nftables.Chain{Name: chainInput, Table: t.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
	forward := c.AddChain(&nftables.Chain{Name: chainForward, Table: t.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	rule := func(ch *nftables.Chain, parts ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t.table, Chain: ch, Exprs: slices.Concat(parts...)})
	}
	host := ^uint32(0) >> t.bits // a slice's host part
	onBridge := slices.Concat(in, ipv4(), daddrIn(t.subnet), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.BigEndian.AppendUint32(nil, host), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binary.BigEndian.AppendUint32(nil, 1)}})
	rule(pre, onBridge, established(), []expr.Any{accept()})
	rule(pre, onBridge, t.lookupPair(), []expr.Any{accept()})
	rule(pre, onBridge, []expr.Any{reject()})

	rule(input, in, established(), []expr.Any{accept()})
	rule(input, in, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: setPorts, SetID: t.sets[setPorts].ID},
		accept()})
	rule(input, in, []expr.Any{reject()})

	rule(forward, established(), []expr.Any{accept()})
	rule(forward, in, out, []expr.Any{accept()})            // decided in prerouting
	rule(forward, notIn, out, dnatted(), tcp(), []expr.Any{ // to a replica's peer port only
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: setPeerOut, SetID: t.sets[setPeerOut].ID},
		accept()})
	rule(forward, notIn, out, []expr.Any{reject()})
	rule(forward, in, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		reject()})
	// Link-local first: no peer port reaches a metadata service.
	rule(forward, in, ipv4(), daddrIn(linkLocal), []expr.Any{reject()})
	rule(forward, in, tcp(), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: setPeerOut, SetID: t.sets[setPeerOut].ID},
		accept()})
	rule(forward, in, []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: setEgressNone, SetID: t.sets[setEgressNone].ID},
		reject()})
	for _, p := range blocked {
		if p != linkLocal {
			rule(forward, in, ipv4(), daddrIn(p), []expr.Any{reject()})
		}
	}

	for name, hook := range map[string]*nftables.ChainHook{chainPeersIn: nftables.ChainHookPrerouting, chainPeersOut: nftables.ChainHookOutput} {
		ch := c.AddChain(&nftables.Chain{Name: name, Table: t.table, Type: nftables.ChainTypeNAT,
			Hooknum: hook, Priority: nftables.ChainPriorityNATDest})
		rule(ch, ipv4(), tcp(), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: mapPeerDNAT, SetID: t.sets[mapPeerDNAT].ID},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1}})
	}

	post := c.AddChain(&nftables.Chain{Name: chainPost, Table: t.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource - 1)})
	rule(post, ipv4(), daddrIn(t.subnet), saddrIn(t.subnet), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1}})
	return t.flush("build")
}

// Rules per chain, for the guard's check.
var chainRules = map[string]int{chainPre: 3, chainInput: 3, chainForward: 7 + len(blocked), chainPost: 1,
	chainPeersIn: 1, chainPeersOut: 1}

// tcp matches TCP packets.
func tcp() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

// dnatted matches packets of connections whose destination was
// translated: to a published peer port (peer_dnat).
func dnatted() []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, 1<<5) // IPS_DST_NAT
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// ipv4 matches IPv4 packets.
func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

// daddrIn matches an IPv4 destination in p.
func daddrIn(p netip.Prefix) []expr.Any { return addrIn(16, p) }

// saddrIn matches an IPv4 source in p.
func saddrIn(p netip.Prefix) []expr.Any { return addrIn(12, p) }

// addrIn matches the IPv4 address at offset of the header in p.
func addrIn(offset uint32, p netip.Prefix) []expr.Any {
	a := p.Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits())), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
	}
}

// lookupPair matches a packet whose source and destination address are an
// element of the pairs set.
func (t *nftTable) lookupPair() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		// The next 32-bit register after the first four bytes of
		// register 1 (NFT_REG32_01), as nft lays out a concatenation.
		&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: setPairs, SetID: t.sets[setPairs].ID},
	}
}

// onBridge matches the packet's input or output interface, by key, being
// one of the bridges (not being one, with invert).
func (t *nftTable) onBridge(key expr.MetaKey, invert bool) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: setBridges, SetID: t.sets[setBridges].ID, Invert: invert}}
}

// established matches packets of connections conntrack has seen answered,
// and the ICMP errors about them.
func established() []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// elements are the elements of set name that s holds.
func (t *nftTable) elements(name string, s tableState) []nftables.SetElement {
	var els []nftables.SetElement
	switch name {
	case setBridges:
		for _, b := range t.bridges {
			k := make([]byte, unix.IFNAMSIZ)
			copy(k, b)
			els = append(els, nftables.SetElement{Key: k})
		}
	case setEgressNone:
		for _, a := range s.egressNone {
			k := a.As4()
			els = append(els, nftables.SetElement{Key: k[:]})
		}
	case setPairs:
		for _, p := range s.pairs {
			els = append(els, pairElement(p))
		}
	case setPorts:
		for _, p := range s.ports {
			els = append(els, nftables.SetElement{Key: binary.BigEndian.AppendUint16(nil, p)})
		}
	case setPeerOut:
		for _, p := range s.peerOut {
			els = append(els, nftables.SetElement{Key: p.key()})
		}
	case mapPeerDNAT:
		for _, p := range s.peerDNAT {
			a := p.replica.As4()
			els = append(els, nftables.SetElement{Key: p.on.key(), Val: a[:]})
		}
	}
	return els
}

// key is p as a concatenation of an address and a port: each field
// padded to 4 bytes.
func (p peerPort) key() []byte {
	a := p.addr.As4()
	return append(binary.BigEndian.AppendUint16(a[:], p.port), 0, 0)
}

func pairElement(p [2]netip.Addr) nftables.SetElement {
	s, d := p[0].As4(), p[1].As4()
	return nftables.SetElement{Key: append(s[:], d[:]...)}
}

// change adds and removes elements in one batch.
func (t *nftTable) change(add, del tableState) error {
	c := t.conn
	for _, name := range []string{setEgressNone, setPairs, setPorts, setPeerOut, mapPeerDNAT} {
		if els := t.elements(name, del); len(els) > 0 {
			if err := c.SetDeleteElements(t.sets[name], els); err != nil {
				return err
			}
		}
		if els := t.elements(name, add); len(els) > 0 {
			if err := c.SetAddElements(t.sets[name], els); err != nil {
				return err
			}
		}
	}
	return t.flush("set elements")
}

// check reports whether the table is there with every chain's rules and
// as many elements in each set as s has.
func (t *nftTable) check(s tableState) (bool, error) {
	if _, err := t.conn.ListTableOfFamily(t.name, nftables.TableFamilyINet); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("nftables table inet %s: %w", t.name, err)
	}
	for name, n := range chainRules {
		rules, err := t.conn.GetRules(t.table, &nftables.Chain{Name: name, Table: t.table})
		if err != nil || len(rules) != n {
			return false, nil
		}
	}
	for name, set := range t.sets {
		els, err := t.conn.GetSetElements(set)
		if err != nil || len(els) != len(t.elements(name, s)) {
			return false, nil
		}
	}
	return true, nil
}

// remove deletes the table; a table already gone is no error.
func (t *nftTable) remove() error {
	t.conn.AddTable(t.table)
	t.conn.DelTable(t.table)
	return t.flush("delete")
}
