package imagetest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoal-run/shoal/internal/image"
)

// BusyboxBinary is the static busybox copied into images.
const BusyboxBinary = "/usr/bin/busybox"

// Applets get a /bin/<applet> -> busybox symlink in the busybox rootfs.
var Applets = []string{
	"sh", "ash", "true", "false", "echo", "cat", "sleep", "ls", "env", "id",
	"pwd", "ps", "kill", "mkdir", "rm", "rmdir", "touch", "cp", "mv", "ln",
	"wc", "head", "tail", "grep", "sed", "awk", "sort", "uniq", "tr", "cut",
	"hostname", "uname", "date", "dd", "yes", "printf", "test", "[", "seq",
	"stat", "chmod", "chown", "mount", "df", "du", "free", "top", "nc",
	"wget", "httpd", "nslookup", "ip", "ifconfig", "ping", "whoami", "xargs",
	"find", "md5sum", "sha256sum", "tee", "timeout", "nproc", "basename",
	"dirname", "readlink", "realpath", "usleep", "vi",
}

// BusyboxDir writes a minimal busybox root filesystem into dst (created if
// missing): /bin/busybox (static) with applet symlinks, /etc/passwd and
// /etc/group with root and nobody, and empty /proc, /sys, /dev, /tmp
// (sticky, world-writable), /root, /var and /run.
func BusyboxDir(dst string) error {
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "root", "var", "run", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(dst, d), 0o755); err != nil {
			return fmt.Errorf("busybox rootfs: %w", err)
		}
	}
	if err := os.Chmod(filepath.Join(dst, "tmp"), 0o1777); err != nil {
		return fmt.Errorf("busybox rootfs: %w", err)
	}
	if err := os.Chmod(filepath.Join(dst, "root"), 0o700); err != nil {
		return fmt.Errorf("busybox rootfs: %w", err)
	}
	if err := copyFile(BusyboxBinary, filepath.Join(dst, "bin", "busybox"), 0o755); err != nil {
		return fmt.Errorf("busybox rootfs: %w", err)
	}
	for _, a := range Applets {
		if err := os.Symlink("busybox", filepath.Join(dst, "bin", a)); err != nil && !os.IsExist(err) {
			return fmt.Errorf("busybox rootfs: applet %s: %w", a, err)
		}
	}
	files := map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":    "root:x:0:\nnobody:x:65534:\n",
		"etc/hostname": "busybox\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dst, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("busybox rootfs: %w", err)
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
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Busybox builds the busybox rootfs into s as tag (Cmd "sh") and returns the
// image. The test fails if that cannot be done.
func Busybox(t testing.TB, s *image.Store, tag string) image.Image {
	t.Helper()
	dir := t.TempDir()
	if err := BusyboxDir(dir); err != nil {
		t.Fatal(err)
	}
	img, err := s.Build(context.Background(), dir, image.BuildOptions{Tag: tag, Cmd: []string{"sh"}})
	if err != nil {
		t.Fatalf("busybox image %q: %v", tag, err)
	}
	return img
}
