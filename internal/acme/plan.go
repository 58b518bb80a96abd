package acme

import (
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/certs"
)

// Timing of orders and renewals.
const (
	// firstBackoff is the wait after a first failure; each failure in a
	// row doubles it up to maxBackoff. Let's Encrypt allows 5 failed
	// validations an hour per name and account: a name that keeps
	// failing is tried 6 times in its first hour, then ever more rarely.
	firstBackoff = time.Minute
	maxBackoff   = 12 * time.Hour
)

// RenewAt is when a certificate valid from notBefore to notAfter is
// renewed: at two thirds of its lifetime (30 days before the end of a
// 90-day certificate, as Let's Encrypt advises).
func RenewAt(notBefore, notAfter time.Time) time.Time {
	return notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)
}

// Backoff is the wait before the next try after failures failed orders
// in a row (failures ≥ 1), at least retryAfter (a rate limit's).
func Backoff(failures int, retryAfter time.Duration) time.Duration {
	d := firstBackoff
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	return max(d, retryAfter)
}

// order is a domain's state between tries, in the store
// (store.ACMEOrderKey): failures in a row and when it may be tried again.
// A name dropped from on demand keeps its order as a tombstone: Demand
// refuses it until RefusedUntil.
type order struct {
	Failures     int       `json:"failures"`
	NextTry      time.Time `json:"next_try,omitzero"`
	LastError    string    `json:"last_error,omitempty"`
	RefusedUntil time.Time `json:"refused_until,omitzero"`
}

// covered reports whether a certificate from files serves domain: an
// operator's own, or their wildcard. ACME does not order for it.
func covered(domain string, all []certs.Cert, now time.Time) bool {
	for _, c := range all {
		if c.Source != certs.SourceFile || c.Pending() || !now.Before(c.NotAfter) {
			continue
		}
		for _, d := range c.Domains {
			if d == domain || (strings.HasPrefix(d, "*.") && wildcardMatch(d[1:], domain)) {
				return true
			}
		}
	}
	return false
}

// wildcardMatch reports whether "*"+suffix (suffix ".example.test")
// covers name: exactly one more label.
func wildcardMatch(suffix, name string) bool {
	label, ok := strings.CutSuffix(name, suffix)
	return ok && label != "" && !strings.Contains(label, ".")
}

// due tells when domain's certificate is next ordered: now or earlier
// when it should be ordered at once, the zero time when never. have is
// its ACME certificate (nil: none yet, or only a pending record).
func due(have *certs.Cert, o order) time.Time {
	at := o.NextTry
	if have != nil && !have.Pending() {
		if r := RenewAt(have.NotBefore, have.NotAfter); r.After(at) {
			at = r
		}
	}
	if at.IsZero() {
		// Never ordered, never failed: at once.
		return time.Unix(0, 0)
	}
	return at
}
