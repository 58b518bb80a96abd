package manifest

import (
	"fmt"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// MaxDomains bounds the custom domains of one app.
const MaxDomains = 100

// HTTPS is the [https] table: what the proxy does for an app's domains
// once it has a certificate for them. Both default to true.
type HTTPS struct {
	// Redirect answers plain HTTP requests to a domain with a
	// certificate 308 to https://.
	Redirect bool `toml:"redirect"`
	// HSTS sends Strict-Transport-Security on HTTPS answers.
	HSTS bool `toml:"hsts"`
}

// CheckDomain reports why s is not a host name shoal can serve an app
// under: lowercase labels of letters, digits and '-' (not at either end),
// at least two of them, at most 253 characters; never under .localhost,
// which the proxy keeps for <app>.localhost.
func CheckDomain(s string) error {
	if len(s) > 253 {
		return fmt.Errorf("%q is longer than 253 characters", s)
	}
	labels := strings.Split(s, ".")
	if len(labels) < 2 {
		return fmt.Errorf("%q is not a domain name (such as www.example.com)", s)
	}
	for _, l := range labels {
		if !isHostLabel(l) {
			return fmt.Errorf("%q is not a domain name: each label lowercase letters, digits and '-', not at either end, 1-63 characters", s)
		}
	}
	if last := labels[len(labels)-1]; last == "localhost" {
		return fmt.Errorf("%q is under .localhost, which every app has already (<app>.localhost)", s)
	}
	return nil
}

func isHostLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// validateDomains checks the domains key: names CheckDomain accepts, no
// name twice.
func (c *Config) validateDomains() error {
	if len(c.Domains) > MaxDomains {
		return errdefs.Invalid("domains", "has %d names; an app has at most %d", len(c.Domains), MaxDomains)
	}
	seen := make(map[string]bool, len(c.Domains))
	for i, d := range c.Domains {
		key := fmt.Sprintf("domains[%d]", i)
		if err := CheckDomain(d); err != nil {
			return errdefs.Invalid(key, "%v", err)
		}
		if seen[d] {
			return errdefs.Invalid(key, "%q is listed twice", d)
		}
		seen[d] = true
	}
	return nil
}
