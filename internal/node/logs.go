package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// LogTailer reads the end of a replica's log on the node the replica runs
// on. The Node that reaches another node over the network implements it,
// and so does this host's, for the leader's calls.
type LogTailer interface {
	// TailLog returns the last n lines of replica id's log (n <= 0: all
	// that the last MiB holds); log is its path relative to the node's
	// apps folder.
	TailLog(ctx context.Context, id, log string, n int) (LogTail, error)
}

// LogTail is the end of a replica's log (its lines as written, stamps
// and all, see ParseLine), when the log was last written, and where a
// follower reads next (see ReadLogFrom).
type LogTail struct {
	Lines  []string
	Mod    time.Time
	Cursor LogCursor
}

// LogMax is the size past which a replica's log is rotated: copied to
// <log>.1 and truncated (see RotateLog).
const LogMax = 1 << 20

// ReadLogTail reads the last n lines of the log at log, a path relative to
// the apps folder dir that names a replica's log (a .log file), reaching
// into its rotated copy as `shoal app logs` does. A log that is not there
// is not found.
func ReadLogTail(dir, log string, n int) (LogTail, error) {
	p, err := logPath(dir, log)
	if err != nil {
		return LogTail{}, err
	}
	fi, err := os.Stat(p)
	if err == nil {
		var t LogTail
		t.Lines, t.Cursor, err = TailLogAt(p, n)
		t.Mod = fi.ModTime()
		if err == nil {
			return t, nil
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		return LogTail{}, fmt.Errorf("log %s: %w", log, errdefs.ErrNotFound)
	}
	return LogTail{}, fmt.Errorf("log %s: %w", log, err)
}

// RotateLog copies the last limit bytes (whole lines) of the log at path to
// path.1, replacing it, when the log holds more than limit bytes, and
// truncates the log. Lines written between the copy and the truncation are
// lost; the copy runs to the file's end to make that window small.
func RotateLog(path string, limit int64) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() <= limit {
		return err
	}
	src, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := path + ".1.tmp"
	dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	off := fi.Size() - limit
	if _, err = src.Seek(off, io.SeekStart); err == nil {
		r := bufio.NewReader(src)
		if _, err = r.ReadString('\n'); err == nil { // skip the cut line
			_, err = io.Copy(dst, r)
		} else if err == io.EOF {
			err = nil
		}
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path+".1")
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rotate %s: %w", path, err)
	}
	if err := src.Truncate(0); err != nil {
		return fmt.Errorf("rotate %s: %w", path, err)
	}
	return nil
}

// TailLog returns the last n lines of a replica's log, reaching into the
// rotated path.1 when the log itself has fewer (n <= 0: all that the last
// MiB of each holds).
func TailLog(path string, n int) []string {
	lines := TailFile(path, n)
	rest := 0 // all that the last MiB of path.1 holds
	if n > 0 {
		if len(lines) >= n {
			return lines
		}
		rest = n - len(lines)
	}
	return append(TailFile(path+".1", rest), lines...)
}

// TailFile returns the last n lines of a file (n <= 0: as many as the
// last MiB holds).
func TailFile(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	return tailOf(f, n, fi.Size())
}

// tailOf returns the last n lines of the first size bytes of f (n <= 0: as
// many as the last MiB holds).
func tailOf(f *os.File, n int, size int64) []string {
	window := int64(1 << 20)
	if n > 0 {
		window = min(window, int64(n)*1024)
	}
	start := max(size-window, 0)
	buf := make([]byte, size-start)
	k, _ := f.ReadAt(buf, start)
	text := strings.TrimRight(string(buf[:k]), "\n")
	if text == "" {
		return nil
	}
	lines := strings.Split(text, "\n")
	if start > 0 && len(lines) > 1 {
		lines = lines[1:] // the first line may be cut
	}
	if n > 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
