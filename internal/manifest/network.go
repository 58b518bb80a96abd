package manifest

import (
	"fmt"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Egress policies of the [network] table.
const (
	// EgressPublic lets a replica reach the internet: any address but the
	// host's, private ranges (RFC 1918, CGNAT), link-local, loopback,
	// multicast and reserved ones. The default.
	EgressPublic = "public"
	// EgressNone lets a replica reach no address outside the host
	// bridge.
	EgressNone = "none"
)

// MaxAllow bounds [network] allow.
const MaxAllow = 64

// Network is the [network] table: what a replica may reach besides the
// self API and the proxy.
type Network struct {
	// Egress is EgressPublic ("" means it too) or EgressNone.
	Egress string `toml:"egress" json:",omitempty"`
	// Allow names apps whose replicas on the same node this app's
	// replicas may reach directly, on any port.
	Allow []string `toml:"allow" json:",omitempty"`
}

// EgressMode is n.Egress with the default spelled out.
func (n Network) EgressMode() string {
	if n.Egress == "" {
		return EgressPublic
	}
	return n.Egress
}

// canonical is n as the hash sees it: the default egress and an empty
// allow list are the same as leaving them out.
func (n Network) canonical() Network {
	if n.Egress == EgressPublic {
		n.Egress = ""
	}
	if len(n.Allow) == 0 {
		n.Allow = nil
	}
	return n
}

// validate checks the [network] table.
func (n *Network) validate() error {
	switch n.Egress {
	case "", EgressPublic, EgressNone:
	default:
		return errdefs.Invalid("network.egress", "%q must be %q (the internet, not the host or private ranges) or %q (nothing outside the bridge)", n.Egress, EgressPublic, EgressNone)
	}
	if len(n.Allow) > MaxAllow {
		return errdefs.Invalid("network.allow", "lists %d apps, at most %d", len(n.Allow), MaxAllow)
	}
	seen := map[string]bool{}
	for i, a := range n.Allow {
		k := fmt.Sprintf("network.allow[%d]", i)
		switch {
		case !IsDNSLabel(a):
			return errdefs.Invalid(k, "%q is not an app name (lowercase letters, digits and '-', starting with a letter, at most %d characters)", a, MaxNameLen)
		case seen[a]:
			return errdefs.Invalid(k, "%q is listed twice", a)
		}
		seen[a] = true
	}
	return nil
}
