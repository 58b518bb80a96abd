package serving

import (
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/store"
)

// The volumes in use are those of every revision a replica still runs, or
// traffic goes to, not only the current one's: during a rollout or a
// traffic split, prune (and volume rm) must leave alone what the previous
// revision's replicas mount. A revision nothing runs any more adds none.
func TestDeclaredVolumesEveryRevision(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	put := func(key string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	cfg := func(vols map[string]string) manifest.Config { return manifest.Config{Name: "hello", Volumes: vols} }
	put(store.RevisionKey("hello", 1), revisionRecord{N: 1, Config: cfg(map[string]string{"old": "/var/old"})})
	put(store.RevisionKey("hello", 2), revisionRecord{N: 2, Config: cfg(map[string]string{"mid": "/var/mid"})})
	rec := appRecord{Revision: 3, Max: 1, Config: cfg(map[string]string{"data": "/data"})}
	put(store.AppKey("hello"), rec)
	used := func() []string {
		t.Helper()
		v, err := DeclaredVolumes(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(v["hello"]))
	}
	if got := used(); !slices.Equal(got, []string{"data"}) {
		t.Fatalf("no replica of an earlier revision: %v, want [data]", got)
	}
	put(store.ReplicaKey("hello", "hello-a"), replicaRecord{ID: "hello-a", App: "hello", Revision: 1})
	put(store.ReplicaKey("hello", "hello-b"), replicaRecord{ID: "hello-b", App: "hello", Revision: 3})
	if got := used(); !slices.Equal(got, []string{"data", "old"}) {
		t.Fatalf("a replica of revision 1 runs: %v, want [data old]", got)
	}
	rec.Traffic = []trafficShare{{Revision: 2, Percent: 10}, {Revision: 3, Percent: 90}}
	put(store.AppKey("hello"), rec)
	if got := used(); !slices.Equal(got, []string{"data", "mid", "old"}) {
		t.Fatalf("traffic split to revision 2: %v, want [data mid old]", got)
	}
}
