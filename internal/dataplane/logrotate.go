package dataplane

import (
	"os"
	"sync"
	"syscall"
)

// RotatingLog is the proxy process's log: it writes through descriptor fd
// (its stderr, which the daemon opened on path) and, once the file would
// grow past max bytes, renames it to path.1 (one older log is kept: the
// run dir is often a tmpfs) and puts a fresh file at path under fd, so
// that a panic's trace lands in the current file too.
type RotatingLog struct {
	mu   sync.Mutex
	path string
	fd   int
	max  int64
	size int64
}

// NewRotatingLog returns the log written through fd, the file at path,
// rotated past max bytes (0: 4 MiB).
func NewRotatingLog(path string, fd int, max int64) *RotatingLog {
	if max <= 0 {
		max = logMax
	}
	l := &RotatingLog{path: path, fd: fd, max: max}
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) == nil {
		l.size = st.Size
	}
	return l
}

func (l *RotatingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.size > 0 && l.size+int64(len(p)) > l.max {
		l.rotate()
	}
	n := 0
	for n < len(p) {
		m, err := syscall.Write(l.fd, p[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			l.size += int64(n)
			return n, &os.PathError{Op: "write", Path: l.path, Err: err}
		}
		n += m
	}
	l.size += int64(n)
	return n, nil
}

// rotate moves the file aside and opens a fresh one under fd, unless fd
// no longer writes the file at path (someone moved it: it is left alone
// and only the count starts over).
func (l *RotatingLog) rotate() {
	var cur, at syscall.Stat_t
	if syscall.Fstat(l.fd, &cur) != nil || syscall.Stat(l.path, &at) != nil || cur.Dev != at.Dev || cur.Ino != at.Ino {
		l.size = 0
		return
	}
	if os.Rename(l.path, l.path+".1") != nil {
		return
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if syscall.Dup3(int(f.Fd()), l.fd, 0) == nil {
		l.size = 0
	}
}
