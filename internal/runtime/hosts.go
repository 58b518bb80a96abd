package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// defaultHosts is the /etc/hosts of an image that has an /etc but none.
const defaultHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"

// maxHostsBytes bounds how much of an image's /etc/hosts is read.
const maxHostsBytes = 1 << 20

// addHostsEntry gives the container's hostname a line in the /etc/hosts
// of its root file system (its writable layer), as Docker and podman do:
// software that resolves its own name (Apache: "AH00557") finds it. The
// image's lines are kept; an image with an /etc but no /etc/hosts gets
// localhost's lines too (owned by the user namespace's root when there is
// one); an image without /etc, or whose /etc/hosts is not a regular file,
// is left alone.
func addHostsEntry(rootfs, hostname string, ns *UserNS) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	if fi, err := root.Stat("etc"); err != nil || !fi.IsDir() {
		return nil
	}
	line := "127.0.1.1\t" + hostname + "\n"
	fi, err := root.Stat("etc/hosts")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := root.OpenFile("etc/hosts", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("/etc/hosts: %w", err)
		}
		defer f.Close()
		if ns != nil {
			if err := f.Chown(int(ns.HostID), int(ns.HostID)); err != nil {
				return fmt.Errorf("/etc/hosts: %w", err)
			}
		}
		if _, err := f.WriteString(defaultHosts + line); err != nil {
			return fmt.Errorf("/etc/hosts: %w", err)
		}
		return f.Close()
	case err != nil || !fi.Mode().IsRegular():
		return nil
	}
	f, err := root.OpenFile("etc/hosts", os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("/etc/hosts: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxHostsBytes))
	if err != nil {
		return fmt.Errorf("/etc/hosts: %w", err)
	}
	if namesHost(b, hostname) {
		return nil
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		line = "\n" + line
	}
	if _, err := f.WriteString(line); err != nil {
		return fmt.Errorf("/etc/hosts: %w", err)
	}
	return f.Close()
}

// namesHost reports whether a line of hosts gives name an address.
func namesHost(hosts []byte, name string) bool {
	sc := bufio.NewScanner(bytes.NewReader(hosts))
	for sc.Scan() {
		l, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(l)
		for _, n := range f[min(1, len(f)):] {
			if n == name {
				return true
			}
		}
	}
	return false
}
