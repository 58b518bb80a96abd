package daemon

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/serving"
	"github.com/shoal-run/shoal/internal/store"
)

// noLeader is an elector that never leads.
type noLeader struct{}

func (noLeader) Leading() cluster.Term    { return nil }
func (noLeader) Changed() <-chan struct{} { return nil }

// TestServingClusterNodes: serving sees the ready and draining nodes with
// their capacity, not the down ones, and no term while the node follows.
func TestServingClusterNodes(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := cluster.Join(ctx, st, cluster.Record{Name: n, CPUs: 2, Memory: 1 << 30}); err != nil {
			t.Fatal(err)
		}
	}
	lease, _ := st.Grant(ctx, time.Minute)
	for _, n := range []string{"n1", "n2"} {
		st.Put(ctx, store.AliveKey(n), []byte(`{"health":"ok"}`), store.WithLease(lease))
	}
	if err := cluster.Drain(ctx, st, "n2"); err != nil {
		t.Fatal(err)
	}
	c := newServingCluster(st)
	if c.Term() != nil {
		t.Fatal("a node that has not joined has a term")
	}
	c.el = noLeader{}
	if c.Term() != nil {
		t.Fatal("a follower has a term")
	}
	got, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []serving.NodeInfo{{Name: "n1", CPUs: 2, Memory: 1 << 30}, {Name: "n2", CPUs: 2, Memory: 1 << 30, Draining: true}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("nodes %+v; want %+v", got, want)
	}
}

// TestBackAgain: the node is told it is back once, at the first good
// heartbeat after its key was dropped.
func TestBackAgain(t *testing.T) {
	backs := make(chan time.Time, 10)
	obs := backAgain(func(at time.Time) { backs <- at })
	for _, s := range []cluster.Status{{Alive: true}, {}, {Lost: true}, {}, {Alive: true}, {Alive: true}} {
		obs(s)
	}
	select {
	case <-backs:
	case <-time.After(10 * time.Second):
		t.Fatal("not told the node is back")
	}
	select {
	case <-backs:
		t.Fatal("told twice")
	case <-time.After(50 * time.Millisecond):
	}
}
