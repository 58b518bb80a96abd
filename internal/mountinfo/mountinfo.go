// Package mountinfo parses the kernel's mount table as /proc/<pid>/mountinfo
// shows it (proc(5)): one mount per line, in mount order, with spaces, tabs,
// newlines and backslashes in paths written as octal escapes (\040 for a
// space). The runtime, the cgroup layout reader and the network namespace
// code all read it through this package.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo, with paths unescaped.
type Mount struct {
	ID     int
	Parent int
	// Dev is the device's "major:minor".
	Dev string
	// Root is the directory of the filesystem shown at Point (for a bind
	// mount or a cgroup namespace, not "/").
	Root  string
	Point string
	// Options are the per-mount options, e.g. "rw,relatime".
	Options string
	// Optional are the tagged fields such as "shared:1" or "master:2".
	Optional []string
	FSType   string
	Source   string
	// SuperOptions are the per-superblock options.
	SuperOptions string
}

// maxLine bounds one line of mountinfo; a path is at most PATH_MAX, and
// escaping can make it four times longer.
const maxLine = 1 << 20

// Parse reads mountinfo text. A line that does not have the fields proc(5)
// describes is an error naming its line number.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if line == "" {
			continue
		}
		m, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return out, nil
}

func parseLine(line string) (Mount, error) {
	// Fields are separated by single spaces; an empty source shows as two
	// spaces in a row, so strings.Fields would lose it.
	f := strings.Split(line, " ")
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if len(f) < 10 || sep < 0 || len(f) < sep+4 {
		return Mount{}, fmt.Errorf("%q: not enough fields", line)
	}
	id, err := strconv.Atoi(f[0])
	if err != nil {
		return Mount{}, fmt.Errorf("mount id %q: %w", f[0], err)
	}
	parent, err := strconv.Atoi(f[1])
	if err != nil {
		return Mount{}, fmt.Errorf("parent id %q: %w", f[1], err)
	}
	m := Mount{
		ID: id, Parent: parent, Dev: f[2],
		Root: Unescape(f[3]), Point: Unescape(f[4]), Options: f[5],
		FSType: Unescape(f[sep+1]), Source: Unescape(f[sep+2]),
		SuperOptions: strings.Join(f[sep+3:], " "),
	}
	if sep > 6 {
		m.Optional = append([]string(nil), f[6:sep]...)
	}
	return m, nil
}

// Unescape undoes the kernel's octal escapes (a backslash and three octal
// digits). A backslash not followed by three octal digits is kept as is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// Self reads /proc/thread-self/mountinfo: the mounts of the calling
// thread's mount namespace, the one its mount and unmount calls act on.
// Not /proc/self, which shows the main thread's: Go parks the main thread
// for good, rather than ending it, when a goroutine locked to it exits, so
// a goroutine that unshared its mount namespace there would leave
// /proc/self showing a stale copy of the table.
func Self() ([]Mount, error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Under returns the mounts of ms whose mount point is dir or below it, in
// mount order (so parents come before what is mounted on top of them).
func Under(ms []Mount, dir string) []Mount {
	dir = strings.TrimSuffix(dir, "/")
	var out []Mount
	for _, m := range ms {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") || dir == "" {
			out = append(out, m)
		}
	}
	return out
}

// MountsUnder lists the mount points at or below dir in the calling
// thread's mount namespace, in mount order.
func MountsUnder(dir string) ([]string, error) {
	ms, err := Self()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range Under(ms, dir) {
		out = append(out, m.Point)
	}
	return out, nil
}

// IsMountPoint reports whether path is the mount point of a mount in the
// calling thread's mount namespace.
func IsMountPoint(path string) (bool, error) {
	ms, err := Self()
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.Point == path {
			return true, nil
		}
	}
	return false, nil
}
