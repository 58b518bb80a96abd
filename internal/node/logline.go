package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// A replica's log holds a line per line its process wrote, each prefixed
// with the time its first byte was read from the replica's output (see
// shoal-init's log mode): StampLen bytes of RFC 3339 UTC time with
// nanoseconds, then a space. Lines without a stamp (logs written before,
// or by a node without shoal-init) are taken to be as old as the stamped
// line before them.
const (
	StampLayout = "2006-01-02T15:04:05.000000000Z"
	StampLen    = len(StampLayout)
)

// ParseLine splits a line of a replica's log into its time (zero without
// a stamp) and its text.
func ParseLine(raw string) (time.Time, string) {
	if len(raw) > StampLen && raw[StampLen] == ' ' && raw[StampLen-1] == 'Z' && raw[4] == '-' {
		if t, err := time.Parse(time.RFC3339Nano, raw[:StampLen]); err == nil {
			return t, raw[StampLen+1:]
		}
	}
	return time.Time{}, raw
}

// Texts strips the stamps off raw lines of a log.
func Texts(raw []string) []string {
	out := make([]string, len(raw))
	for i, r := range raw {
		_, out[i] = ParseLine(r)
	}
	return out
}

// LogCursor is how far a follower of a replica's log has read: the log's
// bytes up to Offset, while its rotated copy was the file Rotated (an inode
// number); the last line read had the time Time, and Same lines in a row
// ended with that time. After a rotation the lines not yet read are those
// after Time (Same of Time's skipped) in the rotated copy.
type LogCursor struct {
	Offset  int64     `json:"offset"`
	Rotated uint64    `json:"rotated,omitempty"`
	Time    time.Time `json:"time"`
	Same    int       `json:"same,omitempty"`
}

// LogFollower reads what a replica's log gained since a cursor, on the
// node the replica runs on; its LogTail's Cursor is where to read next.
type LogFollower interface {
	FollowLog(ctx context.Context, id, log string, c LogCursor) (LogTail, error)
}

// maxFollowRead bounds what one ReadLogFrom returns: a follower that fell
// behind catches up in several reads.
const maxFollowRead = 1 << 20

// inode is the inode number of the file at path (0: none).
func inode(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// advance moves c past the lines raw.
func (c *LogCursor) advance(raw []string) {
	for _, r := range raw {
		t, _ := ParseLine(r)
		switch {
		case t.IsZero():
		case t.Equal(c.Time):
			c.Same++
		default:
			c.Time, c.Same = t, 1
		}
	}
}

// after is raw without the lines up to c's: those older than c.Time and
// the first c.Same of c.Time.
func (c LogCursor) after(raw []string) []string {
	same := 0
	for i, r := range raw {
		t, _ := ParseLine(r)
		switch {
		case t.IsZero() || t.Before(c.Time):
			continue
		case t.Equal(c.Time) && same < c.Same:
			same++
			continue
		}
		return raw[i:]
	}
	return nil
}

// TailLogAt is TailLog with the cursor at the end of what it read.
func TailLogAt(path string, n int) ([]string, LogCursor, error) {
	rot := inode(path + ".1")
	fi, err := os.Stat(path)
	if err != nil {
		return nil, LogCursor{}, err
	}
	c := LogCursor{Offset: fi.Size(), Rotated: rot}
	lines := tailFileTo(path, n, c.Offset)
	if n <= 0 || len(lines) < n {
		rest := 0
		if n > 0 {
			rest = n - len(lines)
		}
		lines = append(TailFile(path+".1", rest), lines...)
	}
	c.advance(lines)
	return lines, c, nil
}

// ReadLogFrom reads the whole lines the log at path gained after c, and
// returns them with the cursor past them. A rotation since c (the rotated
// copy replaced, or the log shorter than c.Offset) is read through: the
// rotated copy's lines after c's time first, then the log from its start.
func ReadLogFrom(path string, c LogCursor) ([]string, LogCursor, error) {
	var out []string
	check := false
	if rot := inode(path + ".1"); rot != c.Rotated {
		c.Rotated, check = rot, true
		out = c.after(TailFile(path+".1", 0))
		c.advance(out)
		c.Offset = 0
	}
	f, err := os.Open(path)
	if err != nil {
		return out, c, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return out, c, err
	}
	if fi.Size() < c.Offset { // truncated by a rotation whose copy was seen
		c.Offset, check = 0, true
	}
	n := min(fi.Size()-c.Offset, maxFollowRead)
	if n <= 0 {
		return out, c, nil
	}
	buf := make([]byte, n)
	k, err := f.ReadAt(buf, c.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return out, c, err
	}
	buf = buf[:k]
	end := bytes.LastIndexByte(buf, '\n')
	if end < 0 {
		if int64(k) < maxFollowRead {
			return out, c, nil // a line still being written
		}
		end = k - 1 // a line longer than a read: cut it
	}
	c.Offset += int64(end + 1)
	lines := strings.Split(string(buf[:end]), "\n")
	if check {
		lines = c.after(lines)
	}
	c.advance(lines)
	return append(out, lines...), c, nil
}

// tailFileTo is TailFile reading the file's first size bytes only.
func tailFileTo(path string, n int, size int64) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	return tailOf(f, n, size)
}

// FollowLogAt is ReadLogFrom for the log at log, a path relative to the
// apps folder dir that names a replica's log (see ReadLogTail).
func FollowLogAt(dir, log string, c LogCursor) (LogTail, error) {
	p, err := logPath(dir, log)
	if err != nil {
		return LogTail{}, err
	}
	lines, c, err := ReadLogFrom(p, c)
	if errors.Is(err, os.ErrNotExist) {
		return LogTail{}, fmt.Errorf("log %s: %w", log, errdefs.ErrNotFound)
	}
	if err != nil {
		return LogTail{}, fmt.Errorf("log %s: %w", log, err)
	}
	return LogTail{Lines: lines, Cursor: c}, nil
}

// logPath is the path of log under dir, or an error for one that is not a
// replica's log under it.
func logPath(dir, log string) (string, error) {
	if dir == "" || !filepath.IsLocal(log) || !strings.HasSuffix(log, ".log") {
		return "", errdefs.Invalid("log", "%q is not a replica's log under the apps folder", log)
	}
	return filepath.Join(dir, log), nil
}
