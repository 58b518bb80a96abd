package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/mountinfo"
)

// mountRootfs mounts an overlay of layers (bottom first) with the upper
// and work directories made in rw (the bundle, or its disk) at
// <bundle>/rootfs. An upper directory already there (a restore's, seeded
// from its checkpoint) is kept.
func mountRootfs(bundle, rw string, layers []string) error {
	upper, work, rootfs := filepath.Join(rw, "upper"), filepath.Join(rw, "work"), filepath.Join(bundle, "rootfs")
	for _, d := range []string{upper, work, rootfs} {
		if err := os.Mkdir(d, 0o755); err != nil && (d != upper || !errors.Is(err, os.ErrExist)) {
			return err
		}
	}
	lower := make([]string, len(layers))
	for i, l := range layers {
		lower[len(layers)-1-i] = l
	}
	data := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + upper + ",workdir=" + work
	if len(data) >= os.Getpagesize() {
		return errdefs.Invalid("layers", "%d layers make overlay options of %d bytes, above the kernel's limit of %d",
			len(layers), len(data), os.Getpagesize()-1)
	}
	if err := unix.Mount("overlay", rootfs, "overlay", 0, data); err != nil {
		return fmt.Errorf("mount overlay at %s: %w", rootfs, err)
	}
	return nil
}

// unmountAll detaches every mount at or below dir, deepest first.
func unmountAll(dir string) (bool, error) {
	mps, err := mountsUnder(dir)
	if err != nil {
		return false, err
	}
	var errs []error
	for i := len(mps) - 1; i >= 0; i-- {
		if err := unix.Unmount(mps[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mps[i], err))
		}
	}
	return len(mps) > 0, errors.Join(errs...)
}

// mountsUnder lists mount points at or below dir in mount order.
func mountsUnder(dir string) ([]string, error) { return mountinfo.MountsUnder(dir) }
