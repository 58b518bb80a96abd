package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
)

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	// Names beginning with this are AUFS bookkeeping (.wh..wh.plnk and the
	// like) and carry nothing for the image.
	whiteoutMeta = ".wh..wh."
	opaqueXattr  = "trusted.overlay.opaque"
)

// EntryError is a layer entry that unpacking refuses. It matches
// errdefs.ErrInvalid with errors.Is.
type EntryError struct {
	Entry  string
	Reason string
}

func (e *EntryError) Error() string { return fmt.Sprintf("entry %q: %s", e.Entry, e.Reason) }

// Is reports that an EntryError is an ErrInvalid.
func (e *EntryError) Is(target error) bool { return target == errdefs.ErrInvalid }

func entryErr(name, format string, args ...any) error {
	return &EntryError{Entry: shortName(name), Reason: fmt.Sprintf(format, args...)}
}

// unpackResult describes one unpacked layer.
type unpackResult struct {
	DiffID  string // sha256 of the uncompressed tar stream
	Size    int64  // uncompressed bytes read
	Entries int
	// DevSkipped counts the device nodes under dev/ left out: a root file
	// system made by mmdebstrap or debootstrap has /dev/null and the like,
	// and the runtime makes a container's /dev itself.
	DevSkipped int
}

// unpackLayer unpacks the layer stream r (a tar, gzip-compressed or not) into
// the existing empty directory dst in overlayfs format, within lim. It never
// creates anything outside dst; on error dst holds a partial tree the caller
// removes.
func unpackLayer(ctx context.Context, r io.Reader, dst string, lim Limits) (unpackResult, error) {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return unpackResult{}, err
	}
	defer root.Close()

	stream, err := decompressed(r)
	if err != nil {
		return unpackResult{}, err
	}
	cnt := &limitCounter{r: stream, h: sha256.New(), max: lim.MaxLayerBytes}
	u := &unpacker{root: root, lim: lim, chown: os.Geteuid() == 0, okDirs: map[string]bool{".": true}}
	tr := tar.NewReader(cnt)
	last := ""
	for {
		if err := ctx.Err(); err != nil {
			return unpackResult{}, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if cnt.over {
				return unpackResult{}, u.tooBig(last)
			}
			return unpackResult{}, fmt.Errorf("after entry %q: reading tar: %w", last, err)
		}
		last = hdr.Name
		if err := u.entry(hdr, tr); err != nil {
			if cnt.over {
				return unpackResult{}, u.tooBig(hdr.Name)
			}
			return unpackResult{}, err
		}
	}
	// The diff ID covers the whole stream, padding after the end marker too.
	if _, err := io.Copy(io.Discard, cnt); err != nil {
		if cnt.over {
			return unpackResult{}, u.tooBig(last)
		}
		return unpackResult{}, fmt.Errorf("after entry %q: reading tar: %w", last, err)
	}
	u.finishDirs()
	return unpackResult{
		DiffID:     "sha256:" + hex.EncodeToString(cnt.h.Sum(nil)),
		Size:       cnt.n,
		Entries:    u.entries,
		DevSkipped: len(u.devSkipped),
	}, nil
}

// decompressed returns the tar stream of a layer, gunzipping it when the
// content starts with the gzip magic.
func decompressed(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return nil, errdefs.Invalid("layer", "zstd compression is not supported")
	}
	return br, nil
}

// limitCounter hashes and counts the uncompressed stream and fails once it
// passes max bytes: the guard against gzip bombs.
type limitCounter struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	max  int64
	over bool
}

var errLayerTooBig = errors.New("layer too big")

func (c *limitCounter) Read(p []byte) (int, error) {
	if c.over {
		return 0, errLayerTooBig
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.h.Write(p[:n])
	if c.n > c.max {
		c.over = true
		return n, errLayerTooBig
	}
	return n, err
}

type dirTime struct {
	name  string
	mtime time.Time
}

type unpacker struct {
	root    *os.Root
	lim     Limits
	chown   bool
	entries int
	written int64
	okDirs  map[string]bool // directories known to be real (no symlink) in dst
	dirs    []dirTime
	// devSkipped holds the device nodes under dev/ left out, so that a
	// hardlink to one is left out too.
	devSkipped map[string]bool
}

func (u *unpacker) tooBig(name string) error {
	return entryErr(name, "layer exceeds the limit of %d uncompressed bytes", u.lim.MaxLayerBytes)
}

// cleanName turns a tar entry name into a relative slash path inside the
// root, refusing absolute names and ".." components.
func cleanName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if strings.HasPrefix(name, "/") {
		return "", errors.New("absolute name escapes the root")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("name holds a NUL byte")
	}
	if err := checkNameShape(strings.TrimRight(name, "/")); err != nil {
		return "", err
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", errors.New("escapes the root (\"..\" component)")
		}
	}
	return path.Clean(name), nil
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	u.entries++
	if u.entries > u.lim.MaxEntries {
		return entryErr(hdr.Name, "layer has more than %d entries", u.lim.MaxEntries)
	}
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return entryErr(hdr.Name, "%v", err)
	}
	dir, base := path.Split(name)
	dir = path.Clean(dir)
	if strings.HasPrefix(base, whiteoutPrefix) {
		if err := u.ensureDir(hdr.Name, dir); err != nil {
			return err
		}
		switch {
		case base == opaqueMarker:
			return u.opaque(hdr.Name, dir)
		case strings.HasPrefix(base, whiteoutMeta):
			return nil
		}
		return u.whiteout(hdr.Name, dir, strings.TrimPrefix(base, whiteoutPrefix))
	}
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return entryErr(hdr.Name, "the root must be a directory")
		}
		return u.meta(hdr, ".", true)
	}
	if err := u.ensureDir(hdr.Name, dir); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return u.mkdir(hdr, name)
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return u.file(hdr, name, r)
	case tar.TypeSymlink:
		if err := u.clear(hdr.Name, name); err != nil {
			return err
		}
		if err := u.root.Symlink(hdr.Linkname, name); err != nil {
			return entryErr(hdr.Name, "symlink: %v", err)
		}
		return u.meta(hdr, name, false)
	case tar.TypeLink:
		return u.hardlink(hdr, name)
	case tar.TypeFifo:
		if err := u.clear(hdr.Name, name); err != nil {
			return err
		}
		if err := u.mknod(hdr.Name, dir, base, unix.S_IFIFO|0o600); err != nil {
			return err
		}
		return u.meta(hdr, name, true)
	case tar.TypeChar, tar.TypeBlock:
		if underDev(name) {
			if u.devSkipped == nil {
				u.devSkipped = map[string]bool{}
			}
			u.devSkipped[name] = true
			return nil
		}
		return devErr(hdr.Name)
	default:
		return entryErr(hdr.Name, "unsupported tar entry type %q", hdr.Typeflag)
	}
}

// underDev reports whether the clean relative name lies under dev/, where
// a device node is skipped rather than refused: the runtime mounts a /dev
// of its own over it.
func underDev(name string) bool {
	return strings.HasPrefix(name, "dev/")
}

// devErr refuses a device node outside dev/.
func devErr(name string) error {
	return entryErr(name, "device nodes are not allowed in images (those under dev/ are skipped: the runtime makes /dev)")
}
