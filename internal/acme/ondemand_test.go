package acme

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/secrets"
	"github.com/shoal-run/shoal/internal/store"
)

// onDemandManager is a Manager with policy o on a store of its own and a
// fake clock; nothing runs.
func onDemandManager(t *testing.T, o OnDemand) (*Manager, store.Store, *clock.Fake) {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	kb := make([]byte, secrets.KeySize)
	rand.Read(kb)
	key, err := secrets.NewKey(kb, "test")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	m, err := New(Options{CA: "https://ca.invalid/dir", Store: st, Key: key, OnDemand: o,
		Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return m, st, clk
}

// The ask URL's answers, yes and no, are kept for askCacheFor: a
// stranger's handshakes for one name ask it once.
func TestOnDemandAskCached(t *testing.T) {
	var asks atomic.Int32
	ask := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asks.Add(1)
		if r.URL.Query().Get("domain") != "yes.example.test" {
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	t.Cleanup(ask.Close)
	m, _, clk := onDemandManager(t, OnDemand{Ask: ask.URL})
	ctx := context.Background()
	for range 20 {
		if err := m.Demand(ctx, "no.example.test"); !errdefs.IsInvalid(err) {
			t.Fatalf("a name the ask URL refuses: %v", err)
		}
		if err := m.Demand(ctx, "yes.example.test"); err != nil {
			t.Fatalf("a name the ask URL allows: %v", err)
		}
	}
	if n := asks.Load(); n != 2 {
		t.Fatalf("the ask URL was asked %d times for two names, want 2", n)
	}
	clk.Advance(askCacheFor)
	if err := m.Demand(ctx, "no.example.test"); !errdefs.IsInvalid(err) {
		t.Fatalf("a name the ask URL refuses: %v", err)
	}
	if n := asks.Load(); n != 3 {
		t.Fatalf("after askCacheFor the ask URL was asked %d times, want 3", n)
	}
}

// No more than OnDemand.Max names are wanted at once; one already wanted
// may be asked for again.
func TestOnDemandCapped(t *testing.T) {
	m, st, _ := onDemandManager(t, OnDemand{Allow: []string{"*.example.test"}, Max: 3})
	ctx := context.Background()
	for i := range 3 {
		if err := m.Demand(ctx, fmt.Sprintf("n%d.example.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Demand(ctx, "n3.example.test"); !errdefs.IsInvalid(err) {
		t.Fatalf("a name beyond the cap: %v", err)
	}
	if err := m.Demand(ctx, "n1.example.test"); err != nil {
		t.Fatalf("a name already wanted: %v", err)
	}
	if kvs, _ := st.List(ctx, store.ACMEWantedPrefix); len(kvs) != 3 {
		t.Fatalf("%d names wanted, want 3", len(kvs))
	}
}

// Demands racing for the last slots reserve no more than OnDemand.Max
// names between them.
func TestOnDemandCapRace(t *testing.T) {
	m, st, _ := onDemandManager(t, OnDemand{Allow: []string{"*.example.test"}, Max: 3})
	ctx := context.Background()
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.Demand(ctx, fmt.Sprintf("r%d.example.test", i)) == nil {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	kvs, err := st.List(ctx, store.ACMEWantedPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 3 || ok.Load() != 3 {
		t.Fatalf("%d names wanted, %d demands allowed; want 3 and 3", len(kvs), ok.Load())
	}
}

// A name wanted on demand whose orders fail MaxFailures times in a row is
// dropped with its order's state and its pending certificate record; a
// name an app claims is kept.
func TestOnDemandDroppedAfterFailures(t *testing.T) {
	m, st, clk := onDemandManager(t, OnDemand{Allow: []string{"*.example.test"}, MaxFailures: 3})
	ctx := context.Background()
	if err := m.Demand(ctx, "gone.example.test"); err != nil {
		t.Fatal(err)
	}
	r := &runner{m: m, w: st, certs: certs.New(st, m.o.Key, clk)}
	boom := errors.New("no answer to the challenge")
	for i := range 3 {
		o, err := r.order(ctx, "gone.example.test")
		if err != nil {
			t.Fatal(err)
		}
		r.failed(ctx, "gone.example.test", "", o, boom)
		if i < 2 {
			for _, k := range []string{store.ACMEWantedKey("gone.example.test"), store.CertKey("gone.example.test")} {
				if _, err := st.Get(ctx, k); err != nil {
					t.Fatalf("%s after %d failures: %v", k, i+1, err)
				}
			}
		}
	}
	for _, k := range []string{store.ACMEWantedKey("gone.example.test"), store.CertKey("gone.example.test")} {
		if _, err := st.Get(ctx, k); !errdefs.IsNotFound(err) {
			t.Errorf("%s after 3 failed orders: %v, want not found", k, err)
		}
	}
	// The dropped name does not come straight back: Demand refuses it
	// until its tombstone expires, and its failures are kept.
	if err := m.Demand(ctx, "gone.example.test"); !errdefs.IsInvalid(err) {
		t.Fatalf("a dropped name demanded again: %v, want refused", err)
	}
	if _, err := st.Get(ctx, store.ACMEWantedKey("gone.example.test")); !errdefs.IsNotFound(err) {
		t.Fatalf("a dropped name is wanted again: %v", err)
	}
	clk.Advance(refuseFor - time.Minute)
	if err := m.Demand(ctx, "gone.example.test"); !errdefs.IsInvalid(err) {
		t.Fatalf("a dropped name demanded before its tombstone expired: %v, want refused", err)
	}
	clk.Advance(time.Minute)
	if err := m.Demand(ctx, "gone.example.test"); err != nil {
		t.Fatalf("a dropped name demanded after its tombstone expired: %v", err)
	}
	if o, err := r.order(ctx, "gone.example.test"); err != nil || o.Failures != 3 {
		t.Fatalf("the tombstone's order: %+v %v, want its 3 failures kept", o, err)
	}
	// An app's domain is never dropped.
	r.failed(ctx, "app.example.test", "web", order{Failures: 10}, boom)
	if kv, err := st.Get(ctx, store.ACMEOrderKey("app.example.test")); err != nil {
		t.Fatalf("an app's domain's order: %v %v", kv, err)
	}
}

// New names the option it is missing.
func TestNewNamesMissingOption(t *testing.T) {
	_, st, _ := onDemandManager(t, OnDemand{})
	for field, o := range map[string]Options{
		"store":              {CA: "https://ca.invalid/dir"},
		"--secrets-key-file": {CA: "https://ca.invalid/dir", Store: st},
	} {
		if _, err := New(o); !errdefs.IsInvalid(err) || errdefs.Field(err) != field {
			t.Errorf("New without %s: %v (field %q)", field, err, errdefs.Field(err))
		}
	}
}

// A handshake for an app's own domain whose certificate is not there yet
// is told it is being ordered (the handshake waits for it), whatever the
// on-demand policy, and nothing is recorded as wanted; a name whose last
// order failed is refused until its back-off ends, so no handshake waits
// for an order that is not coming.
func TestDemandAppDomainAndBackoff(t *testing.T) {
	m, st, clk := onDemandManager(t, OnDemand{Allow: []string{"*.example.test"}})
	ctx := context.Background()
	if _, err := store.ClaimDomains(ctx, st, "web", []string{"www.shop.test"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Demand(ctx, "WWW.shop.test."); err != nil {
		t.Fatalf("an app's domain demanded: %v", err)
	}
	if kvs, err := st.List(ctx, store.ACMEWantedPrefix); err != nil || len(kvs) != 0 {
		t.Fatalf("wanted after an app's domain was demanded: %v %v", kvs, err)
	}
	if err := m.Demand(ctx, "a.example.test"); err != nil {
		t.Fatal(err)
	}
	r := &runner{m: m, w: st, certs: certs.New(st, m.o.Key, clk)}
	for _, d := range []struct{ name, app string }{{"a.example.test", ""}, {"www.shop.test", "web"}} {
		r.failed(ctx, d.name, d.app, order{}, errors.New("no answer to the challenge"))
		err := m.Demand(ctx, d.name)
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("%s demanded in its back-off: %v, want unavailable", d.name, err)
		}
	}
	clk.Advance(Backoff(1, 0))
	for _, name := range []string{"a.example.test", "www.shop.test"} {
		if err := m.Demand(ctx, name); err != nil {
			t.Fatalf("%s demanded after its back-off: %v", name, err)
		}
	}
}

// A key that must not seal (a cluster whose only shared secret is in the
// store) orders nothing: the order fails at once, before the CA is asked,
// and the domain's LAST ERROR says why.
func TestNoOrderWithoutASealingKey(t *testing.T) {
	m, st, clk := onDemandManager(t, OnDemand{})
	why := errors.New("in a cluster, certificate keys need a key kept outside etcd")
	m.o.Key = m.o.Key.OpenOnly(why)
	ctx := context.Background()
	if _, err := store.ClaimDomains(ctx, st, "web", []string{"www.shop.test"}); err != nil {
		t.Fatal(err)
	}
	r := &runner{m: m, w: st, certs: certs.New(st, m.o.Key, clk)}
	r.pass(ctx)
	list, err := r.certs.ListInfo(ctx)
	if err != nil || len(list) != 1 || list[0].LastError != why.Error() || !list[0].Pending() {
		t.Fatalf("certificates after an order without a sealing key: %+v, %v; want www.shop.test pending, LastError %q", list, err, why)
	}
	if _, err := st.Get(ctx, store.ACMEAccountKey); !errdefs.IsNotFound(err) {
		t.Fatalf("an account kept without a sealing key: %v", err)
	}
}
