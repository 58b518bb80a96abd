package daemon

import "github.com/shoal-run/shoal/internal/node"

// remoteNode is another node of the cluster as the serving leader drives
// it: through that node's agent. It is called only once the node has
// joined (the leader is elected after).
func (d *Daemon) remoteNode(name string) node.Node {
	return d.cluster.peers.Remote(name)
}
