package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// busyboxApplets are the commands the benchmark root file system provides.
var busyboxApplets = []string{"true", "false", "sh", "echo", "sleep", "cat", "ls"}

// MakeBusyboxRootfs writes a minimal root file system into dst: a copy of the
// host's static busybox at /bin/busybox, symlinks for a few applets, and the
// empty mount-point folders an OCI runtime expects. dst must not exist yet or
// be empty.
func MakeBusyboxRootfs(dst, busybox string) error {
	if busybox == "" {
		busybox = "/usr/bin/busybox"
	}
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(dst, d), 0o755); err != nil {
			return fmt.Errorf("rootfs %q: %w", dst, err)
		}
	}
	if err := copyFile(busybox, filepath.Join(dst, "bin", "busybox"), 0o755); err != nil {
		return fmt.Errorf("rootfs %q: %w", dst, err)
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(dst, "bin", a)); err != nil {
			return fmt.Errorf("rootfs %q: applet %s: %w", dst, a, err)
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
