package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/image/imagetest"
)

// peerPort is the peer port of TestClusterStatefulPeers' app.
const peerPort = "9471"

// peersManifest is a stateful app of busybox with two ordinals: each
// serves its volume on the app's port and on its peer port, writes its
// environment to env, and fetches each peer's name through SHOAL_PEERS
// (at the peer port, by busybox nc: its static wget needs NSS) into peer,
// once a second.
const peersManifest = `image = "busybox:1"
port = 8080
command = ["sh", "-c", "echo \"$SHOAL_NAME peers=$SHOAL_PEERS hosts=$SHOAL_PEER_HOSTS advertise=$SHOAL_ADVERTISE_HOST\" > /data/env; echo $SHOAL_NAME > /data/name; httpd -f -p 8080 -h /data & httpd -f -p ` + peerPort + ` -h /data & trap 'kill %1 %2; exit' TERM; while true; do for p in $(echo $SHOAL_PEERS | tr , ' '); do printf 'GET /name HTTP/1.0\\r\\n\\r\\n' | nc -w 3 ${p%:*} ${p##*:} | tail -n 1 > /data/peer.tmp; test -s /data/peer.tmp && mv /data/peer.tmp /data/peer; done; sleep 1; done & wait"]
[volumes]
data = "/data"
[stateful]
replicas = 2
peer_ports = [` + peerPort + `]
[health]
http = "/name"
`

// ruleset is nft's listing of every table in nd's network namespace.
func (nd *clusterNode) ruleset() string {
	nd.c.t.Helper()
	out, err := exec.Command("nsenter", "--net=/run/netns/"+nd.NetNS, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		nd.c.t.Fatalf("nft list ruleset on %s: %v: %s", nd.name, err, out)
	}
	return string(out)
}

// TestClusterStatefulPeers: a stateful app's two ordinals, on two nodes
// (each node in its own network namespace, their bridges on the same
// subnet, as two hosts would be), reach each other at their peer port:
// SHOAL_PEERS names the peer's node address and the peer port, which that
// node publishes for its ordinal; SHOAL_ADVERTISE_HOST is the replica's
// node's address. The published port goes with the app, and a node
// stopped with nothing to run leaves no rule of it.
func TestClusterStatefulPeers(t *testing.T) {
	c := startClusterWith(t, 3, false)
	leader, _ := c.roles()
	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := imagetest.BusyboxDir(dir); err != nil {
		t.Fatalf("busybox-static is needed: %v", err)
	}
	for _, nd := range c.nodes {
		if r := nd.shoal("image", "build", dir, "--tag", "busybox:1", "--cmd", "/bin/sh"); r.code != 0 {
			t.Fatalf("image build on %s: %s", nd.name, r.stderr)
		}
	}
	leader.deployApp("pp", peersManifest)
	a := leader.appOn("pp: 2 ordinals ready", "pp", func(a types.App) bool { return len(ordinalNodes(a)) == 2 && len(a.Replicas) == 2 })
	where := ordinalNodes(a)
	if where[0] == where[1] {
		t.Fatalf("both ordinals on %s", where[0])
	}
	node := func(name string) *clusterNode {
		for _, nd := range c.nodes {
			if nd.name == name {
				return nd
			}
		}
		t.Fatalf("no node %s", name)
		return nil
	}
	n0, n1 := node(where[0]), node(where[1])
	vol := func(nd *clusterNode, ord, file string) string {
		b, _ := os.ReadFile(filepath.Join(nd.dataDir, "apps", "pp", "volumes", "data-"+ord, file))
		return strings.TrimSpace(string(b))
	}

	// Ordinal 1 started with ordinal 0 running: its peer is n0's address.
	env := vol(n1, "1", "env")
	if want := "pp-1 peers=" + n0.ip + ":" + peerPort + " hosts=" + n0.ip + " advertise=" + n1.ip; env != want {
		t.Fatalf("ordinal 1's environment: %q, want %q", env, want)
	}
	if env := vol(n0, "0", "env"); env != "pp-0 peers= hosts= advertise="+n0.ip {
		t.Fatalf("ordinal 0's environment: %q", env)
	}
	published := n0.ip + " . " + peerPort + " : "
	if l := n0.ruleset(); !strings.Contains(l, published) {
		t.Fatalf("%s does not publish port %s:\n%s", n0.name, peerPort, l)
	}
	deadline := time.Now().Add(90 * time.Second)
	for vol(n1, "1", "peer") != "pp-0" {
		if time.Now().After(deadline) {
			t.Fatalf("ordinal 1 on %s did not reach ordinal 0 on %s at %s:%s in 90s; its peer file: %q", n1.name, n0.name, n0.ip, peerPort, vol(n1, "1", "peer"))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Removed, the app leaves no published port on any node.
	if r := leader.shoal("app", "rm", "pp"); r.code != 0 {
		t.Fatalf("app rm pp: %s", r.stderr)
	}
	deadline = time.Now().Add(60 * time.Second)
	for _, nd := range c.nodes {
		for strings.Contains(nd.ruleset(), " . "+peerPort+" ") {
			if time.Now().After(deadline) {
				t.Fatalf("port %s is still published on %s after the app's removal:\n%s", peerPort, nd.name, nd.ruleset())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// A node stopped with nothing to run takes its table with it.
	n0.Stop()
	if l := n0.ruleset(); strings.Contains(l, "peer_dnat") {
		t.Fatalf("%s stopped: its table is left:\n%s", n0.name, l)
	}
}
