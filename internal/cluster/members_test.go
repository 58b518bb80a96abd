package cluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/store"
)

// TestStoreMembersNodes: the members are the ready and draining nodes
// with their records, not the down ones.
func TestStoreMembersNodes(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := Join(ctx, st, Record{Name: n, CPUs: 2, Memory: 1 << 30}); err != nil {
			t.Fatal(err)
		}
	}
	lease, _ := st.Grant(ctx, time.Minute)
	for _, n := range []string{"n1", "n2"} {
		st.Put(ctx, store.AliveKey(n), []byte(`{"health":"ok"}`), store.WithLease(lease))
	}
	if err := Drain(ctx, st, "n2"); err != nil {
		t.Fatal(err)
	}
	m := NewStoreMembers(st, clock.Real{}, quiet)
	got, err := m.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "n1" || got[0].State != StateReady || got[0].CPUs != 2 || got[0].Memory != 1<<30 ||
		got[1].Name != "n2" || got[1].State != StateDraining || !got[1].Draining {
		t.Fatalf("members %+v; want n1 ready and n2 draining", got)
	}
}
