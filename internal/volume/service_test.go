package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// List lists the volumes of apps' folders only: a checkpoint of an app
// named volumes (.checkpoints/volumes/<replica>) is not a volume.
func TestListAppsOnly(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"hello/volumes/data", ".checkpoints/volumes/hello-1"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := &Service{Dir: dir, Apps: func(context.Context) (map[string]map[string]string, error) {
		return map[string]map[string]string{"hello": {"data": "/data"}}, nil
	}}
	vols, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 || vols[0].App != "hello" || vols[0].Name != "data" {
		t.Fatalf("volumes: %+v", vols)
	}
}
