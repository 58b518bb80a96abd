package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/acme/pebbletest"
	"github.com/shoal-run/shoal/internal/api/types"
)

// forwarder passes the connections it accepts on a loopback port of its
// own (chosen with :0) to a target set later: Pebble must know where it
// validates before the daemon, whose proxy's ports are chosen with :0 too,
// tells it the CA.
type forwarder struct {
	l      net.Listener
	target atomic.Pointer[string]
	held   atomic.Pointer[chan struct{}] // while set, connections wait, then close
}

// hold keeps each connection accepted from now on unanswered until the
// function returned is called, which closes them.
func (f *forwarder) hold() (release func()) {
	ch := make(chan struct{})
	f.held.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			f.held.CompareAndSwap(&ch, nil)
			close(ch)
		})
	}
}

func newForwarder(t *testing.T) *forwarder {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{l: l}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			to := f.target.Load()
			if to == nil {
				c.Close()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if held := f.held.Load(); held != nil {
					<-*held
					return
				}
				u, err := net.DialTimeout("tcp", *to, 10*time.Second)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, u); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return f
}

func (f *forwarder) port() int { return f.l.Addr().(*net.TCPAddr).Port }

// certOf returns the daemon's certificate named domain, as `shoal cert ls`
// shows it.
func (d *daemon) certOf(domain string) (types.Cert, bool) {
	var list []types.Cert
	if err := json.Unmarshal([]byte(d.must("cert", "ls", "-o", "json")), &list); err != nil {
		d.t.Fatalf("cert ls: %v", err)
	}
	for _, c := range list {
		if len(c.Domains) > 0 && c.Domains[0] == domain {
			return c, true
		}
	}
	return types.Cert{}, false
}

// An app's own domain gets its certificate from Pebble (Let's Encrypt's
// test CA, validating for real) by HTTP-01, answered by the daemon's proxy;
// a client trusting only Pebble's issuing root reaches the app over HTTPS.
// A domain Pebble refuses shows its last error in `shoal cert ls` and an
// event, and the daemon goes on serving.
func TestEdgeACMEWithPebble(t *testing.T) {
	plainFw, tlsFw := newForwarder(t), newForwarder(t)
	peb := pebbletest.Start(t, pebbletest.Options{HTTPPort: plainFw.port(), TLSPort: tlsFw.port()})
	d := startDaemon(t, "--proxy-tls", "127.0.0.1:0", "--acme-ca", peb.Directory, "--acme-ca-root", peb.APIRoot,
		"--acme-email", "ops@shoal.test")
	var h types.Health
	if err := json.Unmarshal([]byte(d.must("info", "--output", "json")), &h); err != nil || h.ProxyTLS == "" {
		t.Fatalf("info: %+v, %v: no HTTPS listener", h, err)
	}
	plainFw.target.Store(&h.Proxy)
	tlsFw.target.Store(&h.ProxyTLS)
	d.exampleImage("hello")
	const domain = "www.shoal.test"
	d.deploy(strings.Replace(manifest("1m", "10m"), `name = "hello"`,
		`name = "hello"`+"\ndomains = [\""+domain+"\", \""+pebbletest.Blocked+"\"]", 1))

	var c types.Cert
	waitFor(t, "the certificate of "+domain+" from Pebble", func() bool {
		var ok bool
		c, ok = d.certOf(domain)
		return ok && !c.Pending
	})
	if c.Source != "acme" || !strings.Contains(c.Issuer, "Pebble") || c.LastError != "" || !c.NotAfter.After(time.Now()) {
		t.Fatalf("cert ls: %+v", c)
	}
	roots, _, err := peb.IssuingRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, network, h.ProxyTLS)
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}}
	var code int
	var body string
	waitFor(t, "https://"+domain+"/ with Pebble's certificate", func() bool {
		resp, err := client.Get("https://" + domain + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return true
	})
	if code != 200 || !strings.HasPrefix(body, "hello from ") {
		t.Fatalf("https://%s/: %d %q", domain, code, body)
	}

	// The refused domain: its last error, an event, and the daemon alive.
	var b types.Cert
	waitFor(t, "the refusal of "+pebbletest.Blocked, func() bool {
		var ok bool
		b, ok = d.certOf(pebbletest.Blocked)
		return ok && b.LastError != ""
	})
	if !b.Pending || !strings.Contains(b.LastError, "rejectedIdentifier") {
		t.Fatalf("cert ls of the refused domain: %+v", b)
	}
	if evs := d.must("events", "--app", "hello"); !strings.Contains(evs, "certificate for "+pebbletest.Blocked+": the CA refused") ||
		!strings.Contains(evs, "certificate for "+domain+" issued") {
		t.Fatalf("events lack the certificates':\n%s", evs)
	}
	if r := d.shoal("info"); r.code != 0 {
		t.Fatalf("the daemon after a refusal: %d %s", r.code, r.stderr)
	}
}
