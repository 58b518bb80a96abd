package acme

import (
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/certs"
)

func TestBackoffDoublesToItsBound(t *testing.T) {
	for _, c := range []struct {
		n     int
		retry time.Duration
		want  time.Duration
	}{
		{1, 0, time.Minute}, {2, 0, 2 * time.Minute}, {3, 0, 4 * time.Minute},
		{11, 0, 12 * time.Hour}, {100, 0, 12 * time.Hour},
		{1, time.Hour, time.Hour}, {5, time.Minute, 16 * time.Minute},
	} {
		if got := Backoff(c.n, c.retry); got != c.want {
			t.Errorf("Backoff(%d, %v) = %v, want %v", c.n, c.retry, got, c.want)
		}
	}
}

func TestDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cert := &certs.Cert{Domains: []string{"a.test"}, CertPEM: []byte("x"), KeyPEM: []byte("k"),
		Source: certs.SourceACME, NotBefore: t0, NotAfter: t0.Add(90 * 24 * time.Hour)}
	renew := t0.Add(60 * 24 * time.Hour)
	for _, c := range []struct {
		name string
		have *certs.Cert
		o    order
		want time.Time
	}{
		{"never ordered: at once", nil, order{}, time.Unix(0, 0)},
		{"pending after a failure: its next try", &certs.Cert{Domains: []string{"a.test"}, Source: certs.SourceACME},
			order{Failures: 1, NextTry: t0.Add(time.Minute)}, t0.Add(time.Minute)},
		{"issued: at two thirds", cert, order{}, renew},
		{"renewal failed: the later of the two", cert, order{Failures: 2, NextTry: renew.Add(2 * time.Minute)}, renew.Add(2 * time.Minute)},
	} {
		if got := due(c.have, c.o); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCoveredByFiles(t *testing.T) {
	now := time.Now()
	all := []certs.Cert{
		{Domains: []string{"*.example.test"}, CertPEM: []byte("c"), KeyPEM: []byte("k"), Source: certs.SourceFile, NotAfter: now.Add(time.Hour)},
		{Domains: []string{"own.test"}, CertPEM: []byte("c"), KeyPEM: []byte("k"), Source: certs.SourceFile, NotAfter: now.Add(time.Hour)},
		{Domains: []string{"old.test"}, CertPEM: []byte("c"), KeyPEM: []byte("k"), Source: certs.SourceFile, NotAfter: now.Add(-time.Hour)},
		{Domains: []string{"acme.test"}, CertPEM: []byte("c"), KeyPEM: []byte("k"), Source: certs.SourceACME, NotAfter: now.Add(time.Hour)},
	}
	for name, want := range map[string]bool{
		"www.example.test": true, "a.b.example.test": false, "example.test": false,
		"own.test": true, "old.test": false, "acme.test": false,
	} {
		if got := covered(name, all, now); got != want {
			t.Errorf("covered(%s) = %v, want %v", name, got, want)
		}
	}
}
