package proxy

import (
	"bytes"
	"time"
)

// Limits bound what one client can hold of the proxy, as a front proxy's
// would. A zero field takes its default.
type Limits struct {
	// MaxHeadBytes bounds a request head (431 and close beyond it).
	MaxHeadBytes int
	// MaxLineBytes bounds the request line (414) and each header line
	// (431).
	MaxLineBytes int
	// MaxConnsPerClient bounds the connections open from one client
	// address; one over it is closed at once.
	MaxConnsPerClient int
	// MinUploadRate, in bytes per second, is the least average rate of a
	// request body once UploadGrace has passed since it began; a slower
	// upload is cut.
	MinUploadRate int
	UploadGrace   time.Duration
}

// Default limits.
const (
	DefaultMaxHeadBytes      = 32 << 10
	DefaultMaxLineBytes      = 8 << 10
	DefaultMaxConnsPerClient = 256
	DefaultMinUploadRate     = 1 << 10
	DefaultUploadGrace       = 10 * time.Second
)

// withDefaults fills the zero fields.
func (l Limits) withDefaults() Limits {
	if l.MaxHeadBytes <= 0 {
		l.MaxHeadBytes = DefaultMaxHeadBytes
	}
	if l.MaxLineBytes <= 0 {
		l.MaxLineBytes = DefaultMaxLineBytes
	}
	l.MaxLineBytes = min(l.MaxLineBytes, l.MaxHeadBytes)
	if l.MaxConnsPerClient <= 0 {
		l.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	if l.MinUploadRate <= 0 {
		l.MinUploadRate = DefaultMinUploadRate
	}
	if l.UploadGrace <= 0 {
		l.UploadGrace = DefaultUploadGrace
	}
	return l
}

// headScan finds the end of a request head that arrives in pieces,
// looking at each byte once, and checks its line lengths on the way.
type headScan struct {
	pos   int // bytes looked at
	line  int // start of the current line
	lines int // lines ended so far
}

// scan looks at b, a head's first bytes (of which the first s.pos were
// looked at before). It returns the head's length once b holds it whole,
// or the status of a line over maxLine: 414 for the request line, 431 for
// a header line.
func (s *headScan) scan(b []byte, maxLine int) (end, code int) {
	for {
		j := bytes.IndexByte(b[s.pos:], '\n')
		if j < 0 {
			s.pos = len(b)
			if len(b)-s.line > maxLine+1 { // a CR may still come
				return 0, s.tooLong()
			}
			return 0, 0
		}
		i := s.pos + j
		n := i - s.line // the line without its LF
		if n > 0 && b[i-1] == '\r' {
			n--
		}
		if n > maxLine {
			return 0, s.tooLong()
		}
		s.pos, s.line = i+1, i+1
		if n == 0 && s.lines > 0 {
			return i + 1, 0
		}
		s.lines++
	}
}

func (s *headScan) tooLong() int {
	if s.lines == 0 {
		return 414
	}
	return 431
}

// clAndTE tells whether a request head has both a Content-Length and a
// Transfer-Encoding header (its lines may end in CRLF or a bare LF).
func clAndTE(head []byte) bool {
	cl, te := false, false
	for len(head) > 0 {
		line := head
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = nil
		}
		name, _, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		name = bytes.TrimRight(name, " \t")
		cl = cl || eqFold(name, "content-length")
		te = te || eqFold(name, "transfer-encoding")
	}
	return cl && te
}
