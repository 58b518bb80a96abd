package userns

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
)

// LayersDir is where the daemon whose data dir is dataDir idmaps its
// layers (its Options.MountDir): /run/shoal-userns/<hash of the data dir>.
func LayersDir(dataDir string) string {
	h := sha256.Sum256([]byte(filepath.Clean(dataDir)))
	return filepath.Join("/run/shoal-userns", hex.EncodeToString(h[:8]))
}

// RemoveLayers unmounts and removes the idmapped layers under dir, as
// Close does: for a daemon killed with SIGKILL, which left them mounted,
// and is not started again on its data dir.
func RemoveLayers(dir string) error { return unmountTree(dir) }
