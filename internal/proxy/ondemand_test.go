package proxy

import (
	"context"
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
