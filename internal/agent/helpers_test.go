package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/store"
)

const testSecret = "s3cret-s3cret-s3cret"

// testStore is a bolt store of the test's.
func testStore(t testing.TB) store.Store {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// addNode records node name at the address of srv (a real HTTP server on
// loopback).
func addNode(t testing.TB, st store.Store, name string, srv *httptest.Server) {
	t.Helper()
	addr := ""
	if srv != nil {
		addr = strings.TrimPrefix(srv.URL, "http://")
	}
	b, _ := json.Marshal(cluster.Record{Name: name, Addr: addr})
	if _, err := st.Put(context.Background(), store.NodeKey(name), b); err != nil {
		t.Fatal(err)
	}
}

// serve starts h on loopback until the test ends.
func serve(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func contains(err error, s string) bool { return strings.Contains(err.Error(), s) }

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
