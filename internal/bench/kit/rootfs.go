package kit

import (
	"fmt"

	"github.com/shoal-run/shoal/internal/image/imagetest"
)

// MakeBusyboxRootfs writes the minimal busybox root file system every subject
// of a suite runs (the same one the tests use) into dst.
func MakeBusyboxRootfs(dst string) error {
	if err := imagetest.BusyboxDir(dst); err != nil {
		return fmt.Errorf("rootfs %q: %w", dst, err)
	}
	return nil
}
