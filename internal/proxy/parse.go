package proxy

import (
	"bytes"
	"time"
)

// The fast path parses request and answer heads itself, strictly: every
// line ends in CRLF, names are tokens, values hold no control characters.
// A request head it does not accept goes to net/http on the same
// connection; an answer head it does not accept is read by
// http.ReadResponse. Parsed fields are slices of the head and live as long
// as it stays in its reader's buffer.

// hline is one header line to pass on: name and value as received.
type hline struct {
	line []byte // "Name: value", without CRLF
	name []byte
}

// request is a parsed request head.
type request struct {
	method, uri, host []byte
	hostSeen          bool
	cl                int64 // body length; 0 without Content-Length
	clSeen            bool
	close             bool // Connection: close
	isHead, safe      bool // HEAD; GET, HEAD or OPTIONS
	idem              bool // idempotent: safe, PUT, DELETE or TRACE
	conn              [][]byte
	cookies           [][]byte           // Cookie values, also passed on in lines
	hop               []byte             // the hop header (HopHeader), not passed on
	sent              sentFields[[]byte] // the forwarded fields' values
	lines             []hline
}

// parse reads a request head ending in an empty line. It returns false for
// anything the fast path leaves to net/http.
func (r *request) parse(head []byte) bool {
	s := &r.sent
	*r = request{conn: r.conn[:0], cookies: r.cookies[:0], lines: r.lines[:0], sent: sentFields[[]byte]{
		xff: s.xff[:0], host: s.host[:0], proto: s.proto[:0], realIP: s.realIP[:0], fwd: s.fwd[:0]}}
	line, rest, ok := nextLine(head)
	if !ok {
		return false
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || !isToken(line[:sp]) {
		return false
	}
	r.method, line = line[:sp], line[sp+1:]
	r.isHead = string(r.method) == "HEAD"
	r.safe, r.idem = methodKind(string(r.method))
	sp = bytes.IndexByte(line, ' ')
	if sp <= 0 || line[0] != '/' || string(line[sp+1:]) != "HTTP/1.1" {
		return false
	}
	r.uri = line[:sp]
	for _, c := range r.uri {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	if !validEscapes(r.uri) {
		return false // net/http's server answers 400
	}
	for {
		if line, rest, ok = nextLine(rest); !ok {
			return false
		}
		if len(line) == 0 {
			break
		}
		name, val, ok := splitHeader(line)
		if !ok {
			return false
		}
		switch {
		case eqFold(name, "host"):
			if r.hostSeen || !validHost(val) {
				return false
			}
			r.host, r.hostSeen = val, true
		case eqFold(name, "content-length"):
			n, ok := parseLength(val)
			if !ok || r.clSeen {
				return false
			}
			r.cl, r.clSeen = n, true
		case eqFold(name, "transfer-encoding"), eqFold(name, "upgrade"), eqFold(name, "expect"):
			return false
		case eqFold(name, "connection"):
			r.conn = append(r.conn, val)
			if hasToken(val, "close") {
				r.close = true
			}
			if hasToken(val, "upgrade") {
				return false
			}
		case eqFold(name, "x-forwarded-for"):
			r.sent.xff = append(r.sent.xff, val)
		case eqFold(name, "shoal-hop"):
			if r.hop != nil {
				return false // net/http refuses two
			}
			r.hop = val
		case eqFold(name, "x-forwarded-host"):
			r.sent.host = append(r.sent.host, val)
		case eqFold(name, "x-forwarded-proto"):
			r.sent.proto = append(r.sent.proto, val)
		case eqFold(name, "x-real-ip"):
			r.sent.realIP = append(r.sent.realIP, val)
		case eqFold(name, "forwarded"):
			r.sent.fwd = append(r.sent.fwd, val)
		case hopByHopName(name):
		default:
			if eqFold(name, "cookie") {
				r.cookies = append(r.cookies, val)
			}
			r.lines = append(r.lines, hline{line: line, name: name})
		}
	}
	return r.hostSeen && len(rest) == 0
}

// answer is a parsed answer head of a replica.
type answer struct {
	code    int
	status  []byte // "200 OK"
	cl      int64  // -1 without Content-Length
	chunked bool
	close   bool          // the replica closes the connection after this answer
	stream  bool          // text/event-stream
	ka      time.Duration // Keep-Alive: timeout=N; 0 when not said
	conn    [][]byte
	lines   []hline
}

// parse reads an answer head ending in an empty line. It returns false for
// anything left to http.ReadResponse.
func (a *answer) parse(head []byte) bool {
	*a = answer{cl: -1, conn: a.conn[:0], lines: a.lines[:0]}
	line, rest, ok := nextLine(head)
	if !ok || len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' {
		return false
	}
	v10 := line[7] == '0'
	var clVal []byte // the first Content-Length's value
	switch line[7] {
	case '1':
	case '0':
		a.close = true
	default:
		return false
	}
	a.status = line[9:]
	for _, c := range a.status[:3] {
		if c < '0' || c > '9' {
			return false
		}
		a.code = a.code*10 + int(c-'0')
	}
	if a.code < 100 || (len(a.status) > 3 && (a.status[3] != ' ' || !validValue(a.status[4:]))) {
		return false
	}
	for {
		if line, rest, ok = nextLine(rest); !ok {
			return false
		}
		if len(line) == 0 {
			break
		}
		name, val, ok := splitHeader(line)
		if !ok {
			return false
		}
		switch {
		case eqFold(name, "content-length"):
			n, ok := parseLength(val)
			if !ok || (a.cl >= 0 && !bytes.Equal(clVal, val)) {
				return false // net/http refuses two spelled apart
			}
			a.cl, clVal = n, val
		case eqFold(name, "transfer-encoding"):
			if a.chunked || !eqFold(val, "chunked") || v10 {
				return false // HTTP/1.0: net/http ignores it, and closes
			}
			a.chunked = true
		case eqFold(name, "connection"):
			a.conn = append(a.conn, val)
			if hasToken(val, "close") {
				a.close = true
			}
		case eqFold(name, "trailer"):
			a.lines = append(a.lines, hline{line: line, name: name})
		case eqFold(name, "keep-alive"):
			a.ka = keepAliveTimeout(val)
		case hopByHopName(name):
		default:
			if eqFold(name, "content-type") && len(val) >= 17 && eqFold(val[:17], "text/event-stream") {
				a.stream = true
			}
			a.lines = append(a.lines, hline{line: line, name: name})
		}
	}
	return len(rest) == 0
}

// headEnd returns the length of the head at the start of b (through its
// empty line), 0 when b holds no complete head, or -1 when the head has a
// line ending in a bare LF.
func headEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return 0
		}
		i += j
		if i == 0 || b[i-1] != '\r' {
			return -1
		}
		if i >= 3 && b[i-2] == '\n' {
			return i + 1
		}
		i++
	}
}

// nextLine cuts a CRLF-terminated line off b.
func nextLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	return b[:i-1], b[i+1:], true
}

// splitHeader splits "Name: value" and checks both.
func splitHeader(line []byte) (name, val []byte, ok bool) {
	i := bytes.IndexByte(line, ':')
	if i <= 0 || !isToken(line[:i]) {
		return nil, nil, false
	}
	val = line[i+1:]
	for len(val) > 0 && (val[0] == ' ' || val[0] == '\t') {
		val = val[1:]
	}
	for len(val) > 0 && (val[len(val)-1] == ' ' || val[len(val)-1] == '\t') {
		val = val[:len(val)-1]
	}
	return line[:i], val, validValue(val)
}

// eqFold compares b with a lower-case ASCII string, ignoring case.
func eqFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// hasToken tells whether a comma-separated list holds tok (lower case).
func hasToken(list []byte, tok string) bool {
	for len(list) > 0 {
		var t []byte
		if i := bytes.IndexByte(list, ','); i >= 0 {
			t, list = list[:i], list[i+1:]
		} else {
			t, list = list, nil
		}
		if eqFold(bytes.Trim(t, " \t"), tok) {
			return true
		}
	}
	return false
}

// listedIn tells whether one of the Connection values names the header k.
func listedIn(conn [][]byte, k []byte) bool {
	for _, list := range conn {
		for len(list) > 0 {
			var t []byte
			if i := bytes.IndexByte(list, ','); i >= 0 {
				t, list = list[:i], list[i+1:]
			} else {
				t, list = list, nil
			}
			if bytes.EqualFold(bytes.Trim(t, " \t"), k) {
				return true
			}
		}
	}
	return false
}

func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// tokenChars marks the bytes allowed in a method or header name.
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenChars[c] {
			return false
		}
	}
	return true
}

// validValue rejects control characters other than tab.
func validValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// validEscapes tells whether every % in the path of a request target
// (before any ?) starts an escape of two hex digits, as net/url requires.
func validEscapes(uri []byte) bool {
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	for i := bytes.IndexByte(uri, '%'); i >= 0; i = bytes.IndexByte(uri, '%') {
		if i+2 >= len(uri) || !isHex(uri[i+1]) || !isHex(uri[i+2]) {
			return false
		}
		uri = uri[i+3:]
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// hostChars marks the bytes of a host name, an IPv6 literal and a port
// that the fast path accepts: token bytes net/http's server accepts in a
// Host too (not #^`|), and ":[]".
var hostChars = func() (t [256]bool) {
	t = tokenChars
	for _, c := range "#^`|" {
		t[c] = false
	}
	for _, c := range ":[]" {
		t[c] = true
	}
	return t
}()

// validHost accepts the bytes of a host name, an IPv6 literal, and a port.
func validHost(b []byte) bool {
	for _, c := range b {
		if !hostChars[c] {
			return false
		}
	}
	return true
}
