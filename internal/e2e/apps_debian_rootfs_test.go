package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDebianRootfsTarball: a plain root file system tar as mmdebstrap
// and debootstrap write it, Debian's python3 with its device nodes under
// dev/ (null, zero, tty, console ...), imports with a note that they were
// skipped (the runtime makes /dev), and an app deployed from it answers
// through the proxy. The same tar with a device node elsewhere is refused,
// naming the file, and leaves no image. The import used to refuse the
// tar for its /dev nodes, after reading it for 11 s.
func TestDebianRootfsTarball(t *testing.T) {
	d := startDaemon(t)
	dir := t.TempDir()
	oci := d.debianTar("python")
	good := filepath.Join(dir, "rootfs.tar")
	bad := filepath.Join(dir, "rootfs-bad.tar")
	rootfsTar(t, oci, good, nil)
	rootfsTar(t, oci, bad, &tar.Header{Name: "./srv/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3})

	res := d.importTar(bad, "debian-python-bad:1")
	if res.code == 0 || !strings.Contains(res.stderr, "srv/null") || !strings.Contains(res.stderr, "device node") {
		t.Fatalf("import of a rootfs with a device node under srv/: exit %d, %s%s; want it refused naming srv/null", res.code, res.stdout, res.stderr)
	}
	if ls := d.must("image", "ls"); strings.Contains(ls, "debian-python-bad") {
		t.Fatalf("a refused import left an image:\n%s", ls)
	}

	res = d.importTar(good, "debian-python-rootfs:1")
	if res.code != 0 {
		t.Fatalf("import of a rootfs tar with device nodes under dev/: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stderr, "device nodes under dev/ skipped") {
		t.Fatalf("the import does not note the device nodes it skipped:\n%s%s", res.stdout, res.stderr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pyroot's log:\n%s", d.shoal("app", "logs", "pyroot").stdout)
		}
	})
	// A root file system has no image config: the command is the app's.
	d.deploy(`
name = "pyroot"
image = "debian-python-rootfs:1"
port = 8080
command = ["/usr/bin/python3", "/srv/app/app.py"]
[scale]
min = 1
max = 1
[health]
http = "/healthz"
`)
	proxy := d.proxyAddr()
	if code, body, _ := get(t, proxy, "pyroot", "/"); code != 200 || !strings.HasPrefix(body, "hello from python 3.") {
		t.Fatalf("GET / of the app from the rootfs tar: %d %q", code, body)
	}
}

// debianTar builds Debian example image name (scripts/debian-images.sh)
// and returns the path of its OCI layout tar.
func (d *daemon) debianTar(name string) string {
	d.t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		d.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "sh", filepath.Join(root, "scripts", "debian-images.sh"), name)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Minute
	if err := cmd.Run(); err != nil {
		d.t.Fatalf("scripts/debian-images.sh %s: %v\n%s", name, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// importTar runs shoal image import FILE --tag tag, with a bound fit for
// some hundred MB.
func (d *daemon) importTar(file, tag string) result {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, shoalBin, "image", "import", file, "--tag", tag)
	cmd.Env = append(os.Environ(), "SHOAL_HOST=unix://"+d.sock)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		d.t.Fatalf("shoal image import %s: %v", file, err)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// mmdebstrapDev are the entries mmdebstrap writes under ./dev in a
// root file system tar (debootstrap's are alike).
var mmdebstrapDev = []tar.Header{
	{Name: "./dev/console", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 5, Devminor: 1},
	{Name: "./dev/fd", Typeflag: tar.TypeSymlink, Mode: 0o777, Linkname: "/proc/self/fd"},
	{Name: "./dev/full", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 7},
	{Name: "./dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
	{Name: "./dev/ptmx", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 5, Devminor: 2},
	{Name: "./dev/pts/", Typeflag: tar.TypeDir, Mode: 0o755},
	{Name: "./dev/random", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 8},
	{Name: "./dev/shm/", Typeflag: tar.TypeDir, Mode: 0o755},
	{Name: "./dev/stderr", Typeflag: tar.TypeSymlink, Mode: 0o777, Linkname: "/proc/self/fd/2"},
	{Name: "./dev/stdin", Typeflag: tar.TypeSymlink, Mode: 0o777, Linkname: "/proc/self/fd/0"},
	{Name: "./dev/stdout", Typeflag: tar.TypeSymlink, Mode: 0o777, Linkname: "/proc/self/fd/1"},
	{Name: "./dev/tty", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 5, Devminor: 0},
	{Name: "./dev/urandom", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 9},
	{Name: "./dev/zero", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 5},
}

// rootfsTar writes at dst the root file system of the one-layer OCI
// layout tar oci (the Debian example images' mmdebstrap output, made
// without /dev) as mmdebstrap writes it by default: with ./dev/ and the
// device nodes of mmdebstrapDev after ./, and extra, if not nil, after
// them.
func rootfsTar(t *testing.T, oci, dst string, extra *tar.Header) {
	t.Helper()
	blobs := map[string][]byte{} // by path in the layout: the small ones
	var layer string
	read := func(want func(name string) bool, each func(name string, r io.Reader) error) {
		f, err := os.Open(oci)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", oci, err)
			}
			if name := path.Clean(h.Name); h.Typeflag == tar.TypeReg && want(name) {
				if err := each(name, tr); err != nil {
					t.Fatalf("%s: %s: %v", oci, name, err)
				}
			}
		}
	}
	read(func(string) bool { return true }, func(name string, r io.Reader) error {
		b, err := io.ReadAll(io.LimitReader(r, 1<<20))
		blobs[name] = b
		return err
	})
	var index, manifest struct {
		Manifests []struct{ Digest string }
		Layers    []struct{ Digest, MediaType string }
	}
	blob := func(digest string) string { return "blobs/" + strings.Replace(digest, ":", "/", 1) }
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("%s: index.json: %v, %d manifests", oci, err, len(index.Manifests))
	}
	if err := json.Unmarshal(blobs[blob(index.Manifests[0].Digest)], &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("%s: manifest: %v, %d layers; want 1", oci, err, len(manifest.Layers))
	}
	layer = blob(manifest.Layers[0].Digest)

	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	read(func(name string) bool { return name == layer }, func(_ string, r io.Reader) error {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		lr := tar.NewReader(zr)
		devDone := false
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if n := path.Clean(h.Name); n == "dev" || strings.HasPrefix(n, "dev/") {
				continue // made below, as mmdebstrap makes them
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := io.Copy(tw, lr); err != nil {
				return err
			}
			if path.Clean(h.Name) != "." || devDone {
				continue
			}
			// After the root, as mmdebstrap writes ./dev.
			devDone = true
			for _, dh := range append([]tar.Header{{Name: "./dev/", Typeflag: tar.TypeDir, Mode: 0o755}}, mmdebstrapDev...) {
				dh.ModTime, dh.Uname, dh.Gname = h.ModTime, "root", "root"
				if err := tw.WriteHeader(&dh); err != nil {
					return err
				}
			}
			if extra != nil {
				if err := tw.WriteHeader(extra); err != nil {
					return err
				}
			}
		}
		if !devDone {
			return fmt.Errorf("no ./ in the layer")
		}
		return nil
	})
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
