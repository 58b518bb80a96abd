package runtime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A checkpoint holds the container's writable layer beside CRIU's images:
// what its processes wrote to their root file system (a database made at
// boot, say) is not in the images, and a restore into a new container,
// whose root file system is the image's layers alone, would find the
// files they hold open missing ("Can't open file ... on restore"). The
// dump copies the overlay's upper directory into <dir>/rootfs-upper once
// the processes are gone; the restore seeds the new container's upper
// directory with it before the overlay is mounted. The copy keeps owners,
// modes, times, extended attributes and overlay whiteouts (cp -a, as
// root), so a container in a user namespace finds its files its own (a
// restore is into the same app, whose ids do not change).

// rootfsUpperDir is the folder of a checkpoint that holds the writable
// layer.
const rootfsUpperDir = "rootfs-upper"

// upperOf is the overlay's upper directory of the container whose bundle
// is bundle: on its disk, if it has one (disks.go).
func upperOf(bundle string) string {
	if fi, err := os.Stat(filepath.Join(bundle, "disk", "upper")); err == nil && fi.IsDir() {
		return filepath.Join(bundle, "disk", "upper")
	}
	return filepath.Join(bundle, "upper")
}

// saveUpper copies the writable layer of the container at bundle into
// checkpoint dir.
func saveUpper(bundle, dir string) error {
	dst := filepath.Join(dir, rootfsUpperDir)
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return copyTree(upperOf(bundle), dst)
}

// seedUpper makes the writable layer in rw (the bundle or its disk) from
// checkpoint dir's, if it has one.
func seedUpper(dir, rw string) error {
	src := filepath.Join(dir, rootfsUpperDir)
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return copyTree(src, filepath.Join(rw, "upper"))
}

// copyTree copies folder src to dst, which must not exist, keeping
// everything an overlay layer holds.
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-a", "--no-target-directory", "--", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w: %s", src, dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}
