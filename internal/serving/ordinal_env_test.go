package serving

import (
	"slices"
	"testing"
)

// hostsDisp is a Dispatcher that knows its nodes' addresses.
type hostsDisp struct {
	Dispatcher
	hosts map[string]string
}

func (d hostsDisp) Host(node string) string { return d.hosts[node] }

// SHOAL_PEERS and SHOAL_PEER_HOSTS of a stateful app: the peers' own
// addresses at the app's port; with stateful.peer_ports, at the first
// peer port; in a cluster, at their nodes' addresses, where the nodes
// publish those ports.
func TestOrdinalEnvPeers(t *testing.T) {
	ctl := &appCtl{name: "db", m: &Manager{}, rec: appRecord{Max: 3}, reps: map[string]*replica{
		"db-0-a": {rec: replicaRecord{ID: "db-0-a", Ordinal: ptr(0), Addr: "10.77.0.5:3306", Node: "n1"}, state: StateReady},
		"db-2-c": {rec: replicaRecord{ID: "db-2-c", Ordinal: ptr(2), Addr: "10.77.0.7:3306", Node: "n3"}, state: StateReady},
	}}
	ctl.rec.Config.Stateful.Replicas = 3
	want := func(what string, peers, hosts string) {
		t.Helper()
		env := ctl.ordinalEnv(1)
		if !slices.Contains(env, EnvPeers+"="+peers) || !slices.Contains(env, EnvPeerHosts+"="+hosts) {
			t.Fatalf("%s: env %q, want %s=%s and %s=%s", what, env, EnvPeers, peers, EnvPeerHosts, hosts)
		}
	}
	want("one host", "10.77.0.5:3306,10.77.0.7:3306", "10.77.0.5,10.77.0.7")
	ctl.rec.Config.Stateful.PeerPorts = []int{4567, 4568}
	want("one host, peer ports", "10.77.0.5:4567,10.77.0.7:4567", "10.77.0.5,10.77.0.7")
	ctl.m.disp = hostsDisp{hosts: map[string]string{"n1": "192.0.2.1", "n3": "192.0.2.3"}}
	want("a cluster, peer ports", "192.0.2.1:4567,192.0.2.3:4567", "192.0.2.1,192.0.2.3")
	ctl.rec.Config.Stateful.PeerPorts = nil
	want("a cluster without peer ports", "10.77.0.5:3306,10.77.0.7:3306", "10.77.0.5,10.77.0.7")
}
