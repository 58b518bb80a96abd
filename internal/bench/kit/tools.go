package kit

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// WorkerRootfs writes the root file system of the host and storage suites'
// containers into dst: busybox, the shoal binary as /shoal (it must be
// static: it runs `shoal bench-worker` inside), and each named host tool
// (xz, sqlite3, dd, ...) with the shared libraries ldd lists for it, at the
// same paths as on the host.
func WorkerRootfs(ctx context.Context, dst, shoalBin string, tools ...string) error {
	if err := MakeBusyboxRootfs(dst); err != nil {
		return err
	}
	static, err := isStatic(shoalBin)
	if err != nil {
		return fmt.Errorf("shoal binary %q: %w", shoalBin, err)
	}
	if !static {
		return fmt.Errorf("shoal binary %q is dynamically linked: build it with CGO_ENABLED=0 (make build does)", shoalBin)
	}
	if err := CopyFileMode(shoalBin, filepath.Join(dst, "shoal"), 0o755); err != nil {
		return err
	}
	for _, t := range tools {
		if err := addHostTool(ctx, dst, t); err != nil {
			return err
		}
	}
	return nil
}

// addHostTool copies the host binary name, found on $PATH, and its shared
// libraries into rootfs.
func addHostTool(ctx context.Context, rootfs, name string) error {
	path, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("tool %s: %w", name, err)
	}
	if path, err = filepath.EvalSymlinks(path); err != nil {
		return fmt.Errorf("tool %s: %w", name, err)
	}
	files := []string{path}
	out, err := exec.CommandContext(ctx, "ldd", path).Output()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					files = append(files, f)
				}
			}
		}
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return fmt.Errorf("tool %s: %w", name, err)
		}
		if err := CopyFileMode(real, filepath.Join(rootfs, f), 0o755); err != nil {
			return fmt.Errorf("tool %s: %w", name, err)
		}
	}
	// The tool is also reachable by its bare name.
	link := filepath.Join(rootfs, "usr/local/bin", name)
	os.MkdirAll(filepath.Dir(link), 0o755)
	os.Remove(link)
	return os.Symlink(path, link)
}

func CopyFileMode(src, dst string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	os.Remove(dst)
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// isStatic reports whether the ELF binary at path has no program
// interpreter, so it runs in a root file system without libraries.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}
