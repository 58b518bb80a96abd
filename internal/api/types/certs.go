package types

import "time"

// Cert is what the API shows of a certificate the proxy serves: its
// domains (the first is its name), where it came from ("file" or
// "acme"), its issuer and validity, its last renewal and the last error
// of one; never its key. Pending: no certificate yet (an ACME order not
// fulfilled), only its last error.
type Cert struct {
	Domains     []string  `json:"domains"`
	Source      string    `json:"source"`
	Issuer      string    `json:"issuer,omitempty"`
	NotBefore   time.Time `json:"not_before,omitzero"`
	NotAfter    time.Time `json:"not_after,omitzero"`
	RenewedAt   time.Time `json:"renewed_at,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	Pending     bool      `json:"pending,omitempty"`
}

// CertRequest is the body of POST /v1/certs: a certificate chain (leaf
// first) and its private key, PEM, for Domain ("*.example.test" for a
// wildcard).
type CertRequest struct {
	Domain  string `json:"domain"`
	CertPEM string `json:"cert_pem"`
	KeyPEM  string `json:"key_pem"`
}
