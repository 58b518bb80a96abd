package runtime

import (
	"context"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/runtime/disk"
)

// disksKept is how many images of a size the pool makes ahead.
const disksKept = 2

// A container with a disk (Spec.DiskBytes) has, in its bundle:
//
//	disk.img   the sparse file of its ext4 file system, from the pool
//	disk/      its mount point (a loop device that clears itself)
//	disk/upper, disk/work  the overlay's writable layer
//
// Delete unmounts it with the overlay (unmountAll: deepest first), the
// loop device clears itself, and the bundle goes with the file. The pool's
// disks made ahead wait, mounted, in <Root>/.disks (a name no container id
// can have).
func (r *Runtime) diskDir() string { return filepath.Join(r.root, ".disks") }

// mountDisk mounts a disk of size bytes at <bundle>/disk and returns the
// directory for the writable layer: that, or bundle itself when size is 0.
func (r *Runtime) mountDisk(ctx context.Context, bundle string, size int64) (string, error) {
	if size == 0 {
		return bundle, nil
	}
	pool, err := r.diskPool()
	if err != nil {
		return "", err
	}
	img, dir := filepath.Join(bundle, "disk.img"), filepath.Join(bundle, "disk")
	if err := pool.Take(ctx, size, img, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// diskPool opens the pool of disks on first use.
func (r *Runtime) diskPool() (*disk.Pool, error) {
	r.disksOnce.Do(func() { r.disks, r.disksErr = disk.NewPool(r.diskDir(), disksKept, r.log) })
	return r.disks, r.disksErr
}

// Close unmounts and removes the disks made ahead. Containers are left as
// they are.
func (r *Runtime) Close() {
	r.disksOnce.Do(func() {})
	if r.disks != nil {
		r.disks.Close()
	}
}
