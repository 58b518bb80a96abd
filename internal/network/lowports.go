package network

import (
	"fmt"
	"os"
)

// AllowLowPorts lets any process in the network namespace at nsPath bind
// ports below 1024 (net.ipv4.ip_unprivileged_port_start = 0). A replica in
// a user namespace of its own has its capabilities there, not in the
// namespaces the host made for it: without this, its root could not bind
// :80 in its own namespace. The ports are the namespace's alone, so no one
// else's are at stake.
func AllowLowPorts(nsPath string) error {
	return withNetNS(nsPath, func() error {
		// /proc/sys/net is the opening thread's namespace's.
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_unprivileged_port_start", []byte("0"), 0); err != nil {
			return fmt.Errorf("netns %s: unprivileged low ports: %w", nsPath, err)
		}
		return nil
	})
}
