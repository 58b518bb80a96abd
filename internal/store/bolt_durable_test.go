package store

import (
	"path/filepath"
	"testing"
)

// Writes are acknowledged only once bbolt's commit has synced the file: a
// daemon killed right after an answer keeps what it answered for.
func TestBoltCommitsAreSynced(t *testing.T) {
	b, err := OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.db.NoSync || b.db.NoGrowSync {
		t.Fatalf("bolt store opened with NoSync=%v NoGrowSync=%v; commits must be synced", b.db.NoSync, b.db.NoGrowSync)
	}
}
