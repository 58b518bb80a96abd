package store

import (
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"
)

// compactFree is the share of a store file's pages that may be free
// before OpenBolt compacts it: bbolt reuses free pages but never gives
// them back, so a store that once held much (a burst of events) would
// keep its size for ever.
const compactFree = 0.5

// compactMinBytes is the smallest file OpenBolt compacts.
const compactMinBytes = 4 << 20

// compactIfSparse rewrites the bbolt file at path without its free pages
// when they are more than compactFree of a file of at least
// compactMinBytes, and reports whether it did. The file is not open
// elsewhere (OpenBolt calls it before it opens the store); the compact
// copy replaces it by a rename, so a crash leaves one or the other.
func compactIfSparse(path string, opts *bolt.Options) (bool, error) {
	st, err := os.Stat(path)
	if err != nil || st.Size() < compactMinBytes {
		return false, nil
	}
	src, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		return false, err
	}
	free := float64(src.Stats().FreePageN+src.Stats().PendingPageN) * float64(src.Info().PageSize)
	if free < compactFree*float64(st.Size()) {
		return false, src.Close()
	}
	tmp := path + ".compact"
	os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, opts)
	if err != nil {
		src.Close()
		return false, err
	}
	err = bolt.Compact(dst, src, 64<<20)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	src.Close()
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("compact: %w", err)
	}
	return true, nil
}
