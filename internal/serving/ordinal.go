package serving

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/shoal-run/shoal/internal/manifest"
)

// Environment of a stateful app's replica (README, Running a database).
const (
	EnvOrdinal   = "SHOAL_ORDINAL"    // its ordinal
	EnvName      = "SHOAL_NAME"       // its stable name, <app>-<ordinal>
	EnvReplicas  = "SHOAL_REPLICAS"   // the app's count of ordinals
	EnvPeers     = "SHOAL_PEERS"      // the other ordinals running: address:port, by ordinal, comma-separated
	EnvPeerHosts = "SHOAL_PEER_HOSTS" // the same addresses without the port
)

// nodeHosts tells the address of a live node of the cluster (its
// --advertise host), where it publishes its stateful replicas' peer ports
// ("": not known).
type nodeHosts interface {
	Host(node string) string
}

// ordinalEnv is the environment of ordinal ord's new replica: its name,
// and the addresses of the other ordinals that run (have an address and
// are not on their way out) as it starts. With stateful.peer_ports an
// address is the peer's at its first peer port: in a cluster its node's
// address, where its node publishes them. ctl.mu is held.
func (ctl *appCtl) ordinalEnv(ord int) []string {
	type peer struct {
		ord  int
		addr string
	}
	var peers []peer
	for _, r := range ctl.reps {
		if o := r.rec.Ordinal; o != nil && *o != ord && r.rec.Addr != "" && !r.state.exiting() && r.state != stateNew {
			peers = append(peers, peer{*o, ctl.peerAddr(r)})
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].ord < peers[j].ord })
	addrs := make([]string, len(peers))
	hosts := make([]string, len(peers))
	for i, p := range peers {
		addrs[i], hosts[i] = p.addr, p.addr
		if h, _, err := net.SplitHostPort(p.addr); err == nil {
			hosts[i] = h
		}
	}
	return []string{
		EnvOrdinal + "=" + strconv.Itoa(ord),
		EnvName + "=" + manifest.ReplicaName(ctl.name, ord),
		EnvReplicas + "=" + strconv.Itoa(ctl.rec.Max),
		EnvPeers + "=" + strings.Join(addrs, ","),
		EnvPeerHosts + "=" + strings.Join(hosts, ","),
	}
}

// peerAddr is where ordinal replica r is reached by its peers (see
// ordinalEnv). ctl.mu is held.
func (ctl *appCtl) peerAddr(r *replica) string {
	ports := ctl.rec.Config.Stateful.PeerPorts
	if len(ports) == 0 {
		return r.rec.Addr
	}
	host, _, err := net.SplitHostPort(r.rec.Addr)
	if err != nil {
		return r.rec.Addr
	}
	if nh, ok := ctl.m.disp.(nodeHosts); ok && r.rec.Node != "" {
		if h := nh.Host(r.rec.Node); h != "" {
			host = h
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(ports[0]))
}

// ordinalsWaiting are the ordinals of a stateful app, in a cluster, that
// may not start, and why: the node that holds their volumes is not live,
// and the app does not reseed. ctl.mu is held.
func (ctl *appCtl) ordinalsWaiting() map[int]string {
	m := ctl.m
	if m.disp == nil || !ctl.rec.Config.Stateful.Enabled() || ctl.rec.Config.Stateful.Reseed {
		return nil
	}
	var out map[int]string
	for o, node := range ctl.rec.VolumeNodes {
		if node == "" || m.disp.IsLive(node) {
			continue
		}
		if out == nil {
			out = map[int]string{}
		}
		out[o] = fmt.Sprintf("ordinal %d (%s) waits for node %s, which holds its volumes and is not live; "+
			"with stateful.reseed = true it would start on another node with fresh volumes", o, manifest.ReplicaName(ctl.name, o), node)
	}
	return out
}

// wait records what keeps an ordinal from starting (why; "" nothing),
// with an event when it changes. ctl.mu is held.
func (ctl *appCtl) wait(why string) {
	if why == ctl.waiting {
		return
	}
	ctl.waiting = why
	if why != "" {
		ctl.m.emit("waiting", ctl.name, "", why, nil)
	}
}

// placeOrdinal is cfg as the start of replica r places it: in a cluster,
// an ordinal of a stateful app goes to the node that holds its volumes
// (placement.nodes); one whose node is lost, started (stateful.reseed),
// anywhere, with fresh volumes, its siblings' nodes last (the app's
// spread). Without stateful.reseed an ordinal whose node is not live
// (it left since the round that started it) does not start: the error
// says so, and the next round has it wait for the node.
func (ctl *appCtl) placeOrdinal(r *replica, cfg manifest.Config) (manifest.Config, error) {
	m := ctl.m
	if m.disp == nil || r.rec.Ordinal == nil {
		return cfg, nil
	}
	ctl.mu.Lock()
	o := *r.rec.Ordinal
	node := ctl.rec.VolumeNodes[o]
	ctl.unlock()
	switch {
	case node == "":
	case m.disp.IsLive(node):
		cfg.Placement.Nodes, cfg.Placement.Prefer = []string{node}, nil
	case !cfg.Stateful.Reseed:
		return cfg, fmt.Errorf("ordinal %d (%s) waits for node %s, which holds its volumes and is not live (stateful.reseed = false)",
			o, manifest.ReplicaName(ctl.name, o), node)
	default:
		m.emit("reseed", ctl.name, r.rec.ID, fmt.Sprintf("node %s, which holds the volumes of ordinal %d, is not live: "+
			"it starts on another node with fresh volumes (stateful.reseed = true)", node, o), nil)
	}
	return cfg, nil
}

// placedOrdinal remembers the node replica r started on as the one that
// holds its ordinal's volumes. ctl.mu is held.
func (ctl *appCtl) placedOrdinal(r *replica) {
	if ctl.m.disp == nil || r.rec.Ordinal == nil || r.rec.Node == "" {
		return
	}
	o := *r.rec.Ordinal
	if ctl.rec.VolumeNodes[o] == r.rec.Node {
		return
	}
	nodes := make(map[int]string, len(ctl.rec.VolumeNodes)+1)
	for k, v := range ctl.rec.VolumeNodes {
		nodes[k] = v
	}
	nodes[o] = r.rec.Node
	ctl.rec.VolumeNodes = nodes // a record others may hold a copy of is never changed in place
	ctl.saveApp()
}
