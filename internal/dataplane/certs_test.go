package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/certs/certstest"
	"github.com/shoal-run/shoal/internal/route"
)

// Certificates pushed through the client are served on the proxy
// process's TLS listener, and pushed again by Sync.
func TestCertsReachTheTLSListener(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctlPath := filepath.Join(dir, ControlSocket)
	cl, err := net.Listen("unix", ctlPath)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(ctlPath, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeConfig{Listener: l, TLSListener: tl, Control: cl, Logger: slog.New(slog.DiscardHandler)})
	}()
	t.Cleanup(func() { cancel(); <-done })
	info, err := c.Info(context.Background())
	if err != nil || info.TLSAddr != tl.Addr().String() {
		t.Fatalf("info %+v, %v: want tls_addr %s", info, err, tl.Addr())
	}
	ca := certstest.NewCA(t, "Plane Test CA")
	cp, kp := ca.Issue(t, []string{"www.example.test"}, time.Time{}, time.Time{})
	c.SetCerts([]route.Cert{{Domains: []string{"www.example.test"}, CertPEM: cp, KeyPEM: kp}})
	c.SetRoute(route.Route{App: "web", Domains: []string{"www.example.test"},
		Endpoints: []route.Endpoint{{ID: "web-1", Addr: backend(t, "web"), Revision: 1}}})
	get := func() (string, error) {
		conn, err := tls.Dial("tcp", info.TLSAddr, &tls.Config{RootCAs: ca.Pool(), ServerName: "www.example.test"})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: www.example.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Strict-Transport-Security") + " " + string(b), nil
	}
	if got, err := get(); err != nil || got != "max-age=31536000 web" {
		t.Fatalf("over TLS: %q, %v", got, err)
	}
	// Taken away behind the client's back, Sync puts them back.
	req, _ := http.NewRequest(http.MethodPut, "http://proxy/v1/certs", nil)
	req.Body = io.NopCloser(strings.NewReader("[]"))
	resp, err := c.hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("put no certs: %v %v", err, resp)
	}
	resp.Body.Close()
	if _, err := get(); err == nil {
		t.Fatal("a handshake without certificates")
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, err := get(); err != nil || got != "max-age=31536000 web" {
		t.Fatalf("over TLS after Sync: %q, %v", got, err)
	}
}

func TestSameTLSAddr(t *testing.T) {
	for _, c := range []struct {
		want, actual string
		same         bool
	}{{"", "", true}, {"", "127.0.0.1:443", false}, {"127.0.0.1:0", "", false}, {"127.0.0.1:0", "127.0.0.1:4443", true}} {
		if got := sameTLSAddr(c.want, c.actual); got != c.same {
			t.Errorf("sameTLSAddr(%q, %q) = %v", c.want, c.actual, got)
		}
	}
}
