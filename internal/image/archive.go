package image

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// openMaybeGzip opens a file, gunzipping it when it starts with the gzip
// magic.
func openMaybeGzip(p string) (io.Reader, func(), error) {
	f, err := openRegular("path", p)
	if err != nil {
		return nil, nil, err
	}
	r, err := decompressed(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return r, func() { f.Close() }, nil
}

// sniffTar reads the tar's names: "oci" for an OCI layout, "docker" for a
// docker-archive, "" for anything else (a rootfs). A device node outside
// dev/ is refused as soon as it is read.
func sniffTar(p string) (string, error) {
	r, closeFn, err := openMaybeGzip(p)
	if err != nil {
		return "", err
	}
	defer closeFn()
	tr := tar.NewReader(r)
	seen := map[string]bool{}
	n := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", errdefs.Invalid("path", "not a readable tar (after %d entries): %v", n, err)
		}
		n++
		name := strings.TrimPrefix(path.Clean(hdr.Name), "./")
		seen[name] = true
		// A device node outside dev/ is refused at once, before the rest of
		// a root file system's tar is read: an image never has one, and
		// neither does an archive of images.
		if (hdr.Typeflag == tar.TypeChar || hdr.Typeflag == tar.TypeBlock) && !underDev(strings.TrimPrefix(name, "/")) {
			return "", devErr(hdr.Name)
		}
	}
	if n == 0 {
		return "", errdefs.Invalid("path", "empty tar")
	}
	switch {
	case seen["manifest.json"]:
		return "docker", nil
	case seen[ocispec.ImageLayoutFile] && seen[ocispec.ImageIndexFile]:
		return "oci", nil
	}
	return "", nil
}

// extractArchive unpacks an OCI layout or docker-archive tar into dst: only
// directories, regular files and symlinks, never outside dst, at most
// maxBytes of file content and maxEntries files, links and directories
// (the parents an entry needs count too: each costs an inode).
func extractArchive(ctx context.Context, p, dst string, maxBytes int64, maxEntries int) error {
	r, closeFn, err := openMaybeGzip(p)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var total int64
	entries := 0
	made := map[string]bool{".": true} // directories counted
	count := func(entry string) error {
		if entries++; entries > maxEntries {
			return errdefs.Invalid("path", "archive %q has more than %d entries (at entry %q)", p, maxEntries, entry)
		}
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errdefs.Invalid("path", "reading tar: %v", err)
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return entryErr(hdr.Name, "%v", err)
		}
		if name == "." {
			continue
		}
		for d := path.Dir(name); !made[d]; d = path.Dir(d) {
			if err := count(hdr.Name); err != nil {
				return err
			}
			made[d] = true
		}
		if hdr.Typeflag == tar.TypeDir && made[name] {
			continue
		}
		if err := count(hdr.Name); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeDir {
			made[name] = true
		}
		if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
			return entryErr(hdr.Name, "%v", err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, 0o755)
		case tar.TypeSymlink:
			err = root.Symlink(hdr.Linkname, name)
		case tar.TypeReg, tar.TypeRegA:
			total += hdr.Size
			if total > maxBytes {
				return entryErr(hdr.Name, "archive exceeds %d bytes", maxBytes)
			}
			err = extractFile(root, name, tr, hdr.Size)
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return entryErr(hdr.Name, "%v", err)
		}
	}
}

func extractFile(root *os.Root, name string, r io.Reader, size int64) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	return err
}
