package serving

import (
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

// ordinalEnv is the environment of ordinal ord's new replica: its name,
// and the addresses of the other ordinals that run (have an address and
// are not on their way out) as it starts. ctl.mu is held.
func (ctl *appCtl) ordinalEnv(ord int) []string {
	type peer struct {
		ord  int
		addr string
	}
	var peers []peer
	for _, r := range ctl.reps {
		if o := r.rec.Ordinal; o != nil && *o != ord && r.rec.Addr != "" && !r.state.exiting() && r.state != stateNew {
			peers = append(peers, peer{*o, r.rec.Addr})
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
