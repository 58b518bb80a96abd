package certs_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/certs/certstest"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/secrets"
	"github.com/shoal-run/shoal/internal/store"
)

func open(t *testing.T) (*certs.Store, store.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.OpenBolt(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := secrets.LoadKey(filepath.Join(dir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	return certs.New(st, key, nil), st
}

func TestCheck(t *testing.T) {
	ca := certstest.NewCA(t, "Test CA")
	now := time.Now()
	cert, key := ca.Issue(t, []string{"www.example.test", "example.test"}, time.Time{}, time.Time{})
	c, err := certs.Check("example.test", cert, key, now)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Domains, ",") != "example.test,www.example.test" || c.Issuer != "Test CA" || c.Source != certs.SourceFile {
		t.Fatalf("checked %+v", c)
	}
	_, otherKey := ca.Issue(t, []string{"example.test"}, time.Time{}, time.Time{})
	old, oldKey := ca.Issue(t, []string{"old.example.test"}, now.Add(-48*time.Hour), now.Add(-time.Hour))
	wild, wildKey := ca.Issue(t, []string{"*.example.test"}, time.Time{}, time.Time{})
	for _, c := range []struct {
		domain         string
		cert, key      []byte
		field, mention string
	}{
		{"example.test", cert, otherKey, "key", "does not go with"},
		{"other.test", cert, key, "cert", "does not cover other.test"},
		{"old.example.test", old, oldKey, "cert", "expired"},
		{"example.test", []byte("junk"), key, "cert", "no PEM"},
		{"example.test", cert, []byte("junk"), "key", "no PEM"},
		{"app.localhost", cert, key, "domain", ".localhost"},
		{"Example.test", cert, key, "domain", "not a domain"},
		{"*.example.test", cert, key, "cert", "does not cover"},
		{"a.b.example.test", wild, wildKey, "cert", "does not cover"},
	} {
		_, err := certs.Check(c.domain, c.cert, c.key, now)
		if !errdefs.IsInvalid(err) || errdefs.Field(err) != c.field || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: %v; want field %s mentioning %q", c.domain, err, c.field, c.mention)
		}
	}
	// A wildcard certificate serves its wildcard and a name under it.
	for _, d := range []string{"*.example.test", "shop.example.test"} {
		if _, err := certs.Check(d, wild, wildKey, now); err != nil {
			t.Errorf("wildcard for %s: %v", d, err)
		}
	}
}

func TestStoreSealsAndFollows(t *testing.T) {
	s, st := open(t)
	ctx := context.Background()
	ca := certstest.NewCA(t, "Test CA")
	cert, key := ca.Issue(t, []string{"example.test"}, time.Time{}, time.Time{})
	c, err := certs.Check("example.test", cert, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []certs.Cert, 16)
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.Follow(fctx, func(cs []certs.Cert) { got <- cs }, func(err error) { t.Error(err) })
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	next := func(want int) []certs.Cert {
		t.Helper()
		for {
			select {
			case cs := <-got:
				if len(cs) == want {
					return cs
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no set of %d certificates followed", want)
			}
		}
	}
	next(0)
	if err := s.Put(ctx, c); err != nil {
		t.Fatal(err)
	}
	if cs := next(1); !bytes.Equal(cs[0].KeyPEM, key) || cs[0].Name() != "example.test" {
		t.Fatalf("followed %+v", cs[0])
	}
	kv, err := st.Get(ctx, store.CertKey("example.test"))
	if err != nil || bytes.Contains(kv.Value, []byte("PRIVATE")) || bytes.Contains(kv.Value, key[40:80]) {
		t.Fatalf("stored record %s, %v: holds the key in the clear", kv.Value, err)
	}
	// An ACME order that failed before its first certificate is a
	// pending record with its error; Update keeps the rest of a record.
	p, err := s.Update(ctx, "shop.example.test", func(c *certs.Cert) error {
		c.Source, c.LastError = certs.SourceACME, "rate limited"
		return nil
	})
	if err != nil || !p.Pending() {
		t.Fatalf("pending: %+v, %v", p, err)
	}
	if _, err := s.Update(ctx, "example.test", func(c *certs.Cert) error { c.LastError = "refused"; return nil }); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].LastError != "refused" || !bytes.Equal(list[0].CertPEM, cert) || list[1].LastError != "rate limited" {
		t.Fatalf("list %+v, %v", list, err)
	}
	next(2)
	if err := s.Delete(ctx, "shop.example.test"); err != nil {
		t.Fatal(err)
	}
	next(1)
	if err := s.Delete(ctx, "shop.example.test"); !errdefs.IsNotFound(err) {
		t.Fatalf("deleted twice: %v", err)
	}
	// Another node's key cannot open it, and says which flag to set.
	other, err := secrets.LoadKey(filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.New(st, other, nil).Get(ctx, "example.test"); err == nil || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Fatalf("opened with another key: %v", err)
	}
}
