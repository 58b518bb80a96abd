package cli

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/certs/certstest"
	"github.com/shoal-run/shoal/internal/errdefs"
)

type fakeCerts struct {
	mu   sync.Mutex
	list []types.Cert
}

func (f *fakeCerts) List(context.Context) ([]types.Cert, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]types.Cert{}, f.list...), nil
}

func (f *fakeCerts) Add(_ context.Context, req types.CertRequest) (types.Cert, error) {
	c, err := certs.Check(req.Domain, []byte(req.CertPEM), []byte(req.KeyPEM), time.Now())
	if err != nil {
		return types.Cert{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := types.Cert{Domains: c.Domains, Source: c.Source, Issuer: c.Issuer, NotAfter: c.NotAfter}
	f.list = append(f.list, w)
	return w, nil
}

func (f *fakeCerts) Remove(_ context.Context, domain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range f.list {
		if c.Domains[0] == domain {
			f.list = append(f.list[:i], f.list[i+1:]...)
			return nil
		}
	}
	return errdefs.ErrNotFound
}

func TestCertCommands(t *testing.T) {
	fc := &fakeCerts{}
	ts := httptest.NewServer((&api.Server{Certs: fc}).Handler(""))
	t.Cleanup(ts.Close)
	dir := t.TempDir()
	ca := certstest.NewCA(t, "CLI Test CA")
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cp, kp := ca.Issue(t, []string{"*.example.test"}, time.Time{}, time.Time{})
	_, otherKey := ca.Issue(t, []string{"x.test"}, time.Time{}, time.Time{})
	certFile, keyFile, otherFile := write("c.pem", cp), write("k.pem", kp), write("other.pem", otherKey)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cert", "add", "*.example.test", "--cert", certFile}, "--key"},
		{[]string{"cert", "add", "*.example.test", "--cert", certFile, "--key", otherFile}, "--key " + otherFile + ": does not go with"},
		{[]string{"cert", "add", "shop.other.test", "--cert", certFile, "--key", keyFile}, "--cert " + certFile + ": does not cover shop.other.test"},
		{[]string{"cert", "add", "app.localhost", "--cert", certFile, "--key", keyFile}, ".localhost"},
		{[]string{"cert", "add", "*.example.test", "--cert", filepath.Join(dir, "none.pem"), "--key", keyFile}, "none.pem"},
	} {
		code, _, errs := shoal(t, ts.URL, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d %q; want 2 naming %q", c.args, code, errs, c.want)
		}
	}
	code, out, errs := shoal(t, ts.URL, "cert", "add", "*.example.test", "--cert", certFile, "--key", keyFile)
	if code != 0 || !strings.Contains(out, "added *.example.test") || !strings.Contains(out, "CLI Test CA") {
		t.Fatalf("add: %d %q %q", code, out, errs)
	}
	code, out, _ = shoal(t, ts.URL, "cert", "ls")
	if code != 0 || !strings.Contains(out, "*.example.test") || !strings.Contains(out, "file") || !strings.Contains(out, "CLI Test CA") {
		t.Fatalf("ls: %d %q", code, out)
	}
	code, out, _ = shoal(t, ts.URL, "cert", "ls", "-o", "json")
	if code != 0 || !strings.Contains(out, `"source": "file"`) || strings.Contains(out, "PRIVATE") {
		t.Fatalf("ls -o json: %d %q", code, out)
	}
	if code, _, errs := shoal(t, ts.URL, "cert", "rm", "*.example.test"); code != 0 {
		t.Fatalf("rm: %d %q", code, errs)
	}
	if code, _, _ := shoal(t, ts.URL, "cert", "rm", "*.example.test"); code == 0 {
		t.Fatal("rm of a certificate that is gone succeeded")
	}
}
