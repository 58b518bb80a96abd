// Package network gives containers their network namespace. A namespace is a
// persistent one (a bind mount of an nsfs file under a state directory) that
// the OCI runtime joins by path instead of creating its own.
//
// Two modes exist. In None mode the namespace holds only a loopback interface
// that is up. In Bridge mode the standard CNI plugins attach it as well: a veth
// pair to the bridge (default "shoal0") with an address from host-local IPAM in
// the subnet (default 10.77.0.0/16), the gateway at .1 and outbound traffic
// masqueraded. The configuration is bundled: New writes the conflist itself.
// As gateway the bridge plugin turns IPv4 forwarding on
// (net.ipv4.ip_forward), which outbound traffic needs; it stays on.
//
// Creating a namespace, and above all running the CNI plugins, costs far more
// than a container start should wait for, so the Manager keeps a small pool of
// ready namespaces per mode and refills it in the background. Acquire takes
// one from the pool, or makes one on the spot when the pool is empty.
// Release destroys a namespace; Recycle puts a None one back in the pool
// instead when a check from inside shows that nothing was left in it.
//
// Every namespace file is named "<mode>-<random id>"; the name is also the
// CNI container ID, so a namespace can be detached after a restart from its
// path alone. Restore keeps the namespaces the daemon still uses and removes
// everything else.
package network

import (
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Mode is how a container is networked.
type Mode string

// The network modes.
const (
	// None is a namespace with only loopback. It keeps no TCP connection
	// in TIME_WAIT (tcp_max_tw_buckets 0): on a loopback of its own no
	// late segment of an old connection can reach a new one, and a
	// connection left waiting would keep the namespace from being reused.
	None Mode = "none"
	// Bridge is a namespace attached to the host bridge with its own address.
	Bridge Mode = "bridge"
)

// modes lists every mode, in the order the pool fills them.
var modes = []Mode{None, Bridge}

// ParseMode returns the Mode named by s ("none" or "bridge", any case).
// Anything else, the empty string included, is an errdefs.ErrInvalid naming
// the field "network".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case string(None):
		return None, nil
	case string(Bridge):
		return Bridge, nil
	}
	return "", errdefs.Invalid("network", "unknown network mode %q (want none or bridge)", s)
}

// valid reports whether m is a known mode.
func (m Mode) valid() bool { return m == None || m == Bridge }
