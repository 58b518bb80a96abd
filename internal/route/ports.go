package route

import (
	"fmt"
	"strconv"
	"strings"
)

// PortRange is the ports TCP routes may listen on (both ends included),
// which the operator sets (the daemon's --proxy-tcp-ports). The zero
// value is DefaultTCPPorts.
type PortRange struct {
	Lo, Hi int
}

// DefaultTCPPorts keeps TCP routes off the privileged ports and the
// well-known services below 10000 (the daemon's own API, dashboard and
// proxy ports among them).
var DefaultTCPPorts = PortRange{Lo: 10000, Hi: 65535}

// ParsePortRange reads "LO-HI" or a single port.
func ParsePortRange(s string) (PortRange, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		hi = lo
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	switch {
	case err1 != nil || err2 != nil:
		return PortRange{}, fmt.Errorf("%q is not LO-HI (e.g. 10000-19999)", s)
	case a < 1 || b > 65535 || a > b:
		return PortRange{}, fmt.Errorf("%q is not a range of ports 1-65535, low end first", s)
	}
	return PortRange{Lo: a, Hi: b}, nil
}

// OrDefault is r, or DefaultTCPPorts for the zero value.
func (r PortRange) OrDefault() PortRange {
	if r == (PortRange{}) {
		return DefaultTCPPorts
	}
	return r
}

// Contains says whether port is in r (the default for the zero value).
func (r PortRange) Contains(port int) bool {
	r = r.OrDefault()
	return port >= r.Lo && port <= r.Hi
}

// String is r as ParsePortRange reads it.
func (r PortRange) String() string {
	r = r.OrDefault()
	return strconv.Itoa(r.Lo) + "-" + strconv.Itoa(r.Hi)
}
