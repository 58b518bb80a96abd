// Package clustertest makes a real shoal cluster on one host for the
// end-to-end tests and the cluster benchmark: three etcd members (Debian's
// etcd) and shoal daemons of the binary under test, each daemon in a
// network namespace of its own joined by a veth pair to a bridge the
// cluster makes. Close removes all of it: processes, mounts, cgroups,
// namespaces, links and folders, also after a node was killed.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Options describe a cluster to make.
type Options struct {
	// Shoal is the shoal binary the daemons run.
	Shoal string
	// Dir is a scratch folder the cluster owns (etcd data, node folders,
	// logs); Close removes what the cluster made under it.
	Dir string
	// Net is the first two octets of the bridge's subnet, e.g. "10.213": the
	// bridge gets <Net>.<N>.1/24 and node i <Net>.<N>.<10+i>.
	Net string
	// N picks the bridge and the subnet's third octet (1-250); 0 picks one
	// whose bridge is not on the host yet.
	N int
	// Tag names the cluster's links and namespaces (two lower-case letters,
	// e.g. "cl"): bridge sh<Tag><N>, namespaces shoal-<Tag><N>-<i>.
	Tag string
	// CgroupPrefix is the start of each node's --cgroup-parent
	// (<CgroupPrefix>-<N>-<i>).
	CgroupPrefix string
	// Proxy runs each node's app proxy on <node ip>:8080 in its namespace;
	// without it the daemons run none (--proxy off).
	Proxy bool
	// Args are more daemon flags, given to every node.
	Args []string
	// Etcd is the etcd server binary (default /usr/bin/etcd, then PATH).
	Etcd string
}

// Cluster is a running cluster; Close removes it.
type Cluster struct {
	Opts   Options
	N      int
	Bridge string // on the host
	HostIP string // the bridge's address: etcd's clients listen there
	Etcd   []*Member
	Nodes  []*Node

	mu       sync.Mutex
	cleanups []func() error // run last first
}

// ProxyPort is the port of each node's proxy when Options.Proxy is set.
const ProxyPort = 8080

// APIPort is the port of each node's --advertise address.
const APIPort = 7070

// Start makes the bridge, three etcd members and nodes shoal daemons, and
// waits until each daemon answers. On error what was made is removed.
func Start(ctx context.Context, o Options, nodes int) (_ *Cluster, retErr error) {
	if o.Shoal == "" || o.Dir == "" || o.Net == "" || len(o.Tag) != 2 || o.CgroupPrefix == "" {
		return nil, fmt.Errorf("clustertest: Shoal, Dir, Net, a two-letter Tag and CgroupPrefix are required")
	}
	if o.Etcd == "" {
		o.Etcd = "/usr/bin/etcd"
		if _, err := os.Stat(o.Etcd); err != nil {
			p, lerr := exec.LookPath("etcd")
			if lerr != nil {
				return nil, fmt.Errorf("etcd server not found at /usr/bin/etcd or in PATH: install the Debian package etcd-server (apt-get install etcd-server)")
			}
			o.Etcd = p
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("clustertest: %w", err)
	}
	c := &Cluster{Opts: o, N: o.N}
	defer func() {
		if retErr != nil {
			c.Close()
		}
	}()
	n, err := addBridge(o.Tag, o.N)
	if err != nil {
		return nil, err
	}
	c.N = n
	c.Bridge = bridgeName(o.Tag, n)
	c.HostIP = fmt.Sprintf("%s.%d.1", o.Net, c.N)
	c.onClose(func() error { return ip("link", "del", c.Bridge) })
	if err := ip("addr", "add", c.HostIP+"/24", "dev", c.Bridge); err != nil {
		return nil, err
	}
	if err := ip("link", "set", c.Bridge, "up"); err != nil {
		return nil, err
	}
	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	for i := 1; i <= nodes; i++ {
		if _, err := c.AddNode(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// onClose registers f to run at Close, before what was registered earlier.
func (c *Cluster) onClose(f func() error) {
	c.mu.Lock()
	c.cleanups = append(c.cleanups, f)
	c.mu.Unlock()
}

// Close stops every node and etcd member and removes everything the
// cluster made, in the reverse order of making it. It returns what could
// not be removed.
func (c *Cluster) Close() error {
	c.mu.Lock()
	fs := c.cleanups
	c.cleanups = nil
	c.mu.Unlock()
	var errs []error
	for i := len(fs) - 1; i >= 0; i-- {
		if err := fs[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StoreFlag is the daemons' --store.
func (c *Cluster) StoreFlag() string {
	var eps []string
	for _, m := range c.Etcd {
		eps = append(eps, m.Client)
	}
	return "etcd://" + strings.Join(eps, ",")
}

// Endpoints are the etcd members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Etcd {
		eps = append(eps, "http://"+m.Client)
	}
	return eps
}

// Node returns the node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, nd := range c.Nodes {
		if nd.Name == name {
			return nd
		}
	}
	return nil
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func bridgeName(tag string, n int) string { return fmt.Sprintf("sh%s%d", tag, n) }

// addBridge makes the bridge of cluster number n, or with n 0 of the
// first number no bridge on the host has, and returns the number. A
// cluster started at the same time by another process may take a free
// number between the look and the add: then the next is tried.
func addBridge(tag string, n int) (int, error) {
	pick := n == 0
	if pick {
		n = 1
		for n < 250 && linkExists(bridgeName(tag, n)) {
			n++
		}
	}
	for {
		name := bridgeName(tag, n)
		if !pick && linkExists(name) {
			return 0, fmt.Errorf("clustertest: bridge %s is on the host already (another cluster's?)", name)
		}
		err := ip("link", "add", name, "type", "bridge")
		if err == nil {
			return n, nil
		}
		if !pick || n >= 250 || !linkExists(name) {
			return 0, err
		}
		n++
	}
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}
