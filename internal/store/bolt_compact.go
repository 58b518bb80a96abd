package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// compactFree is the share of a store file's pages that may be free
// before OpenBolt compacts it: bbolt reuses free pages but never gives
// them back, so a store that once held much (a burst of events) would
// keep its size for ever.
const compactFree = 0.5

// compactMinBytes is the smallest file OpenBolt compacts.
const compactMinBytes = 4 << 20

// openLock takes the lock that OpenBolt holds from before a compaction
// until the store file is open: bbolt's own lock is on the file's inode,
// which a compaction replaces, so an opener that found the old inode
// would otherwise write into a file no path names any more. It waits up
// to timeout for another opener; the caller unlocks by closing the file.
func openLock(path string, timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || !time.Now().Before(deadline) {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, bolt.ErrTimeout
			}
			return nil, fmt.Errorf("lock %s.lock: %w", path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// compactIfSparse rewrites the bbolt file at path without its free pages
// when they are more than compactFree of a file of at least
// compactMinBytes, and reports whether it did. The caller holds
// openLock; the file's own lock is held until the compact copy has
// replaced it (a rename, then the folder synced), so a crash leaves one
// or the other.
func compactIfSparse(path string, opts *bolt.Options) (bool, error) {
	st, err := os.Stat(path)
	if err != nil || st.Size() < compactMinBytes {
		return false, nil
	}
	src, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		return false, err
	}
	defer src.Close()
	free := float64(src.Stats().FreePageN+src.Stats().PendingPageN) * float64(src.Info().PageSize)
	if free < compactFree*float64(st.Size()) {
		return false, nil
	}
	tmp := path + ".compact"
	os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, opts)
	if err != nil {
		return false, fmt.Errorf("compact %s: %w", path, err)
	}
	err = bolt.Compact(dst, src, 64<<20)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("compact %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return true, nil
}
