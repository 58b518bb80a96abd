package store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
	"github.com/shoal-run/shoal/internal/store/storetest"
)

func openEtcd(t *testing.T, endpoint string) *store.Etcd {
	t.Helper()
	e, err := store.OpenEtcd(context.Background(), []string{endpoint})
	if err != nil {
		t.Fatalf("open etcd: %v", err)
	}
	return e
}

// TestEtcdContract runs the contract against a real etcd server, a fresh one
// for every case.
func TestEtcdContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openEtcd(t, storetest.StartEtcd(t))
	})
}

func TestEtcdSchema(t *testing.T) {
	ctx := context.Background()
	ep := storetest.StartEtcd(t)
	e := openEtcd(t, ep)
	kv, err := e.Get(ctx, store.MetaSchemaKey)
	if err != nil || string(kv.Value) != "1" {
		t.Fatalf("schema key: %q, %v; want 1", kv.Value, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// A second open of the same store leaves the schema as it is.
	e = openEtcd(t, ep)
	again, err := e.Get(ctx, store.MetaSchemaKey)
	if err != nil || again.ModRev != kv.ModRev {
		t.Fatalf("schema key rewritten on reopen: %+v, %v", again, err)
	}
	if _, err := e.Put(ctx, store.MetaSchemaKey, []byte("2")); err != nil {
		t.Fatal(err)
	}
	e.Close()
	_, err = store.OpenEtcd(ctx, []string{ep})
	if !errors.Is(err, store.ErrNewerSchema) || !strings.Contains(err.Error(), ep) {
		t.Fatalf("open of a newer schema: %v; want ErrNewerSchema naming %s", err, ep)
	}
}

func TestEtcdUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := fmt.Sprintf("127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port)
	l.Close() // nothing listens there now
	_, err = store.OpenEtcd(context.Background(), []string{ep}, store.WithDialTimeout(500*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), ep) {
		t.Fatalf("open of an unreachable endpoint: %v; want an error naming %s", err, ep)
	}
	if _, err := store.OpenEtcd(context.Background(), nil); !errdefs.IsInvalid(err) {
		t.Fatalf("open with no endpoints: %v; want invalid", err)
	}
}

func TestEtcdCloseEndsWatches(t *testing.T) {
	e := openEtcd(t, storetest.StartEtcd(t))
	ch, err := e.Watch(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatal("watch channel still open after close")
		}
	}
}
