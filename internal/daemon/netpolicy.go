package daemon

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// allowHostPorts lets replicas reach the host at the ports of addrs (the
// self API's and the proxy's listeners; "" is skipped): nothing else on
// the host answers them. A loopback listener is left out, as the bridge
// never reaches it.
func (d *Daemon) allowHostPorts(addrs ...string) error {
	for _, a := range addrs {
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("host port of %q: %w", a, err)
		}
		if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
			continue
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("host port of %q: %w", a, err)
		}
		if err := d.net.AllowHostPort(n); err != nil {
			return fmt.Errorf("network policy: %w", err)
		}
	}
	return nil
}
