package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// inputErrnos are the ways a caller-named path can fail to be reached that
// are the caller's to fix, not the store's.
var inputErrnos = []error{
	fs.ErrNotExist, fs.ErrPermission, syscall.ENOTDIR, syscall.ELOOP, syscall.ENAMETOOLONG,
}

// inputErr makes a missing, unreachable or forbidden path invalid input in
// field; its message keeps the path the error names. Other errors pass
// unchanged.
func inputErr(field string, err error) error {
	if err == nil || errdefs.IsInvalid(err) {
		return err
	}
	for _, e := range inputErrnos {
		if errors.Is(err, e) {
			return errdefs.Invalid(field, "%v", err)
		}
	}
	return err
}

// statInput stats a caller-named path; the error, for the caller to wrap
// with the path, is invalid input in field where inputErr says so.
func statInput(field, p string) (fs.FileInfo, error) {
	fi, err := os.Stat(p)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Path == p {
			err = pe.Err // the caller names p
		}
		return nil, inputErr(field, err)
	}
	return fi, nil
}

// fileKind names what a mode describes, for error messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "irregular file"
}

// openRegular opens a caller-named file for reading. A FIFO is opened
// without blocking and refused like a device or socket: reading one would
// hang or never end.
func openRegular(field, p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, inputErr(field, err)
	}
	return checkRegular(field, p, f)
}

// openRegularIn is openRegular for a name inside root.
func openRegularIn(field string, root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, inputErr(field, err)
	}
	return checkRegular(field, name, f)
}

func checkRegular(field, p string, f *os.File) (*os.File, error) {
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, errdefs.Invalid(field, "%q is a %s, not a regular file", p, fileKind(fi.Mode()))
	}
	return f, nil
}
