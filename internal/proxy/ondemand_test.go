package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// A handshake for a name no certificate serves, which CertMissing says is
// being obtained, is held until SetCerts brings its certificate, even past
// the handshake's own bound: the first visit to a name on demand works. A
// name CertMissing refuses fails its handshake.
func TestEdgeOnDemandHoldsHandshake(t *testing.T) {
	asked := make(chan string, 8)
	bound := 200 * time.Millisecond
	f := newTLSFrontWith(t, Options{handshakeTimeout: bound, CertMissing: func(ctx context.Context, name string) bool {
		asked <- name
		return name == "new.example.test"
	}})
	f.p.SetCerts([]route.Cert{f.cert(t, "other.test")})
	rt := routeTo("web", namedBackend(t, "web"))
	rt.Domains = []string{"new.example.test"}
	f.p.SetRoute(rt)

	if _, err := f.dialTLS(t, "stranger.test", nil); err == nil {
		t.Fatal("a handshake for a refused name succeeded")
	}
	if got := <-asked; got != "stranger.test" {
		t.Fatalf("asked for %q", got)
	}

	type result struct {
		name string
		err  error
	}
	var wg sync.WaitGroup
	done := make(chan result, 2)
	for range 2 { // two visitors at once, both held
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := f.dialTLS(t, "new.example.test", nil)
			if err != nil {
				done <- result{err: err}
				return
			}
			done <- result{name: c.ConnectionState().PeerCertificates[0].DNSNames[0]}
		}()
	}
	for range 2 {
		if got := <-asked; got != "new.example.test" {
			t.Fatalf("asked for %q", got)
		}
	}
	// Past the bound of a handshake that waits for nothing.
	time.Sleep(bound + time.Second)
	select {
	case r := <-done:
		t.Fatalf("a held handshake ended before its certificate came: %+v", r)
	default:
	}
	// Another certificate arriving does not end the wait.
	f.p.SetCerts([]route.Cert{f.cert(t, "other.test"), f.cert(t, "unrelated.test")})
	f.p.SetCerts([]route.Cert{f.cert(t, "other.test"), f.cert(t, "new.example.test")})
	wg.Wait()
	for range 2 {
		if r := <-done; r.err != nil || r.name != "new.example.test" {
			t.Fatalf("held handshake: %+v", r)
		}
	}
	if resp := f.getTLS(t, "new.example.test"); resp.StatusCode != 200 || body(resp) != "web" {
		t.Fatalf("GET https://new.example.test/: %d", resp.StatusCode)
	}
	if n := f.p.edge.waiting.Load(); n != 0 {
		t.Fatalf("%d handshakes still counted as waiting", n)
	}
}

// One client address holds at most maxOnDemandPerClient handshakes for
// certificates on demand: its next fails at once (a TLS alert), not held,
// so that a few addresses cannot take every place and hold back others'
// first visits; another address is still held, and all are served once
// the certificate comes. An IPv6 client counts by its /64.
func TestEdgeOnDemandCapPerClient(t *testing.T) {
	f := newTLSFrontWith(t, Options{CertMissing: func(ctx context.Context, name string) bool { return true }})
	f.p.SetCerts([]route.Cert{f.cert(t, "other.test")})
	rt := routeTo("web", namedBackend(t, "web"))
	rt.Domains = []string{"new.example.test"}
	f.p.SetRoute(rt)

	dialFrom := func(ip string) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := tls.DialWithDialer(d, "tcp", f.tlsAddr, &tls.Config{RootCAs: f.ca.Pool(), ServerName: "new.example.test"})
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	waiting := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); f.p.edge.waiting.Load() != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d handshakes held, want %d", f.p.edge.waiting.Load(), n)
			}
		}
	}
	held := make(chan error, maxOnDemandPerClient+1)
	for range maxOnDemandPerClient {
		go func() { _, err := dialFrom("127.0.0.1"); held <- err }()
	}
	waiting(maxOnDemandPerClient)

	// One more from the same address: refused while the others are still
	// held (were it held too, the count would pass the cap).
	refused := make(chan error, 1)
	go func() { _, err := dialFrom("127.0.0.1"); refused <- err }()
	for {
		select {
		case err := <-refused:
			if err == nil {
				t.Fatal("a handshake beyond the client's cap succeeded")
			}
		case <-time.After(5 * time.Millisecond):
			if n := f.p.edge.waiting.Load(); n > maxOnDemandPerClient {
				t.Fatalf("%d handshakes of one client held, the cap is %d", n, maxOnDemandPerClient)
			}
			continue
		}
		break
	}
	if n := f.p.edge.waiting.Load(); n != maxOnDemandPerClient {
		t.Fatalf("%d handshakes held after the refusal, want %d", n, maxOnDemandPerClient)
	}
	// Another address is held as before.
	go func() { _, err := dialFrom("127.0.0.2"); held <- err }()
	waiting(maxOnDemandPerClient + 1)

	f.p.SetCerts([]route.Cert{f.cert(t, "other.test"), f.cert(t, "new.example.test")})
	for range maxOnDemandPerClient + 1 {
		if err := <-held; err != nil {
			t.Fatalf("a held handshake: %v", err)
		}
	}
	waiting(0)
	if n := len(f.p.edge.held); n != 0 {
		t.Fatalf("held counts left for %d clients", n)
	}
}

func TestOnDemandClient(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7:443":              "192.0.2.7",
		"[::ffff:192.0.2.7]:443":     "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":   "2001:db8:1:2::/64",
		"[fe80::1%eth0]:1":           "fe80::/64",
		"[2001:db8:1:3::1]:443":      "2001:db8:1:3::/64",
	} {
		a, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := onDemandClient(a); got != want {
			t.Errorf("onDemandClient(%s) = %q, want %q", in, got, want)
		}
	}
}

// One subscriber has many addresses: an IPv6 /56 (256 /64s) or /48, IPv4
// addresses in one /24. Their held handshakes are capped by prefix too, so
// that 200 addresses of one /56 cannot take every place; another /56 is
// still held until its /48 holds its most, and another /48 or /24 is held
// as before. Every count is given back.
func TestOnDemandCapByPrefix(t *testing.T) {
	var e edge
	hold := func(format string, n int) (got []string) {
		t.Helper()
		for i := range n {
			a, err := net.ResolveTCPAddr("tcp", fmt.Sprintf(format, i))
			if err != nil {
				t.Fatal(err)
			}
			if c := onDemandClient(a); e.holdFor(c) {
				got = append(got, c)
			}
		}
		return got
	}
	// 200 addresses, each in its own /64 of 2001:db8:0:ab00::/56.
	a := hold("[2001:db8:0:ab%02x::1]:443", 200)
	if len(a) != 32 {
		t.Fatalf("200 addresses of one /56 hold %d handshakes, want its cap 32", len(a))
	}
	b := hold("[2001:db8:0:ac%02x::1]:443", 200) // another /56 of the same /48
	if len(b) != 32 {
		t.Fatalf("another /56 holds %d, want 32", len(b))
	}
	if c := hold("[2001:db8:0:ad%02x::1]:443", 10); len(c) != 0 {
		t.Fatalf("a third /56 of a /48 holding 64 holds %d, want 0", len(c))
	}
	d := hold("[2001:db8:1:ab%02x::1]:443", 1) // another /48
	if len(d) != 1 {
		t.Fatal("a handshake of another /48 refused")
	}
	v4 := hold("198.51.100.%d:443", 200)
	if len(v4) != 32 {
		t.Fatalf("200 addresses of one IPv4 /24 hold %d, want 32", len(v4))
	}
	if other := hold("198.51.101.%d:443", 1); len(other) != 1 {
		t.Fatal("a handshake of another /24 refused")
	}
	v4 = append(v4, "198.51.101.0")
	for _, c := range slices.Concat(a, b, d, v4) {
		e.unhold(c)
	}
	if len(e.held) != 0 {
		t.Fatalf("held counts left: %v", e.held)
	}
}
