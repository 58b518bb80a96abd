package manifest

import (
	"bytes"
	"fmt"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/units"
)

// Limits of a shoal.toml. Parse measures a file against them with a linear
// pre-scan before the TOML parser sees it, so that a file of any shape costs
// time and memory in proportion to its size (the parser's cost grows with
// the square of the nesting). A real manifest is far below each of them.
const (
	// MaxFileSize bounds what reaches the parser, whose lexer spends
	// about 40 ms of CPU a MiB on shapes within every other limit (long
	// strings, blanks).
	MaxFileSize  = 256 << 10 // bytes of the whole file
	MaxLines     = 16384     // lines of the file (the parser's cost is mostly per line and per byte)
	MaxDepth     = 8         // keys and array levels from the root to any value ("health.command[0]" is 3)
	MaxKeys      = 2048      // keys and table headers in the file
	MaxArrayLen  = 1024      // elements of one array
	MaxValues    = 8192      // values in the file: keys' values and array elements
	MaxStringLen = 64 << 10  // bytes of one string, key or value
	MaxKeyPath   = 256       // bytes of a dotted key path from the root ("scale.max" is 9)
)

// scan states.
const (
	stKey   = iota // a key (or, in the document, a table header) comes next
	stEq           // a key was read; "=" comes next
	stValue        // a value (or an array element) comes next
	stAfter        // a value was read
)

// frame is the document, an inline table or an array being scanned.
type frame struct {
	array bool
	depth int // a table: the depth of the table itself (its keys are deeper); an array: of its elements
	path  int // bytes of the key path to it
	elems int // an array's elements so far
}

// scanStats is what a scan measured: the largest of each limited quantity.
type scanStats struct {
	depth, keys, values, elems, str, path int
}

// scanner is the pre-scan: a small TOML lexer that follows strings of all
// four kinds, comments, brackets and braces, dotted keys and table
// headers, and counts what the limits bound. It understands valid TOML
// exactly and is lenient with invalid TOML (the parser refuses that at its
// first error, having seen only the measured part before it).
type scanner struct {
	b     []byte
	i     int
	line  int
	stack [MaxDepth + 1]frame
	n     int // frames above the document
	state int
	// the depth and key path bytes of the value about to be read
	vdepth, vpath int
	arrays        bool // the file has an array of tables, [[a]]
	st            scanStats
}

// checkLimits measures data against the limits; the error names the line
// and the limit.
func checkLimits(data []byte) error {
	_, err := scanLimits(data)
	return err
}

func scanLimits(data []byte) (scanStats, error) {
	if len(data) > MaxFileSize {
		return scanStats{}, errdefs.Invalid("manifest", "%d bytes, above the limit of %s", len(data), units.FormatBytes(MaxFileSize))
	}
	s := &scanner{b: data, line: 1}
	// The parser reads over a byte order mark (UTF-8, or UTF-16's).
	for _, bom := range []string{"\xef\xbb\xbf", "\xff\xfe", "\xfe\xff"} {
		if bytes.HasPrefix(data, []byte(bom)) {
			s.i = len(bom)
			break
		}
	}
	err := s.run()
	return s.st, err
}

func (s *scanner) fail(format string, args ...any) error {
	return errdefs.Invalid(fmt.Sprintf("line %d", s.line), format, args...)
}

func (s *scanner) newline() error {
	s.line++
	if s.line > MaxLines {
		return s.fail("more than %d lines (the limit)", MaxLines)
	}
	return nil
}

func (s *scanner) top() *frame { return &s.stack[s.n] }

func (s *scanner) run() error {
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch c {
		case '\n':
			if err := s.newline(); err != nil {
				return err
			}
			s.i++
			if s.n == 0 {
				s.state = stKey
			}
		case ' ', '\t', '\r':
			s.i++
		case '#':
			for s.i < len(s.b) && s.b[s.i] != '\n' {
				s.i++
			}
		case '=':
			s.i++
			s.state = stValue
		case ',':
			s.i++
			switch {
			case s.n == 0:
			case s.top().array:
				s.state = stValue
			default:
				s.state = stKey
			}
		case ']', '}':
			s.i++
			if s.n > 0 {
				s.n--
				s.state = stAfter
			}
		case '[':
			if s.n == 0 && s.state == stKey {
				if err := s.header(); err != nil {
					return err
				}
				continue
			}
			if err := s.value(); err != nil {
				return err
			}
			s.i++
			if err := s.push(frame{array: true, depth: s.vdepth + 1, path: s.vpath}); err != nil {
				return err
			}
			s.state = stValue
		case '{':
			if err := s.value(); err != nil {
				return err
			}
			s.i++
			if err := s.push(frame{depth: s.vdepth, path: s.vpath}); err != nil {
				return err
			}
			s.state = stKey
		default:
			if s.state == stKey {
				if err := s.key(); err != nil {
					return err
				}
				continue
			}
			if s.state == stValue {
				if err := s.value(); err != nil {
					return err
				}
			}
			if c == '"' || c == '\'' {
				if _, err := s.str(); err != nil {
					return err
				}
			} else {
				s.scalar()
			}
			s.state = stAfter
		}
	}
	return nil
}

func (s *scanner) push(f frame) error {
	if s.n == MaxDepth {
		return s.fail("nested more than %d levels deep (the limit)", MaxDepth)
	}
	s.n++
	s.stack[s.n] = f
	return nil
}

// value counts a value starting: in an array, an element (its depth is the
// array's); in a table, the value of the key just read.
func (s *scanner) value() error {
	s.st.values++
	if s.st.values > MaxValues {
		return s.fail("more than %d values in the file (the limit)", MaxValues)
	}
	f := s.top()
	if s.n == 0 || !f.array {
		return nil
	}
	f.elems++
	s.st.elems = max(s.st.elems, f.elems)
	if f.elems > MaxArrayLen {
		return s.fail("an array of more than %d elements (the limit)", MaxArrayLen)
	}
	s.vdepth, s.vpath = f.depth, f.path
	return s.depth(f.depth, f.path)
}

func (s *scanner) depth(d, path int) error {
	s.st.depth = max(s.st.depth, d)
	s.st.path = max(s.st.path, path)
	if d > MaxDepth {
		return s.fail("nested %d levels deep, above the limit of %d", d, MaxDepth)
	}
	if path > MaxKeyPath {
		return s.fail("a key path of %d bytes, above the limit of %d", path, MaxKeyPath)
	}
	return nil
}

func (s *scanner) countKey() error {
	s.st.keys++
	if s.st.keys > MaxKeys {
		return s.fail("more than %d keys in the file (the limit)", MaxKeys)
	}
	return nil
}

// key reads a dotted key of a key/value pair: its depth and path extend
// the enclosing table's.
func (s *scanner) key() error {
	segs, n, err := s.dotted()
	if err != nil {
		return err
	}
	if err := s.countKey(); err != nil {
		return err
	}
	f := s.top()
	s.vdepth = f.depth + segs
	s.vpath = f.path + n
	if f.path > 0 {
		s.vpath++
	}
	s.state = stEq
	return s.depth(s.vdepth, s.vpath)
}

// header reads a table header, [a.b] or [[a.b]]; the keys below it extend
// its path.
func (s *scanner) header() error {
	s.i++
	arr := s.i < len(s.b) && s.b[s.i] == '['
	if arr {
		s.i++
	}
	segs, n, err := s.dotted()
	if err != nil {
		return err
	}
	for k := 0; k < 2 && s.i < len(s.b) && s.b[s.i] == ']'; k++ {
		s.i++
	}
	if err := s.countKey(); err != nil {
		return err
	}
	// Below an array of tables, a part of a header's path may be an
	// element of one too ([[a]] then [a.b] is a[0].b): once a file has
	// one, count each part as two levels, an upper bound.
	s.arrays = s.arrays || arr
	d := segs
	if s.arrays {
		d = 2 * segs
	}
	s.stack[0] = frame{depth: d, path: n}
	s.state = stAfter
	return s.depth(d, n)
}

// dotted reads a dotted key (bare and quoted parts, blanks around the
// dots) and returns its parts and its length in bytes with the dots.
func (s *scanner) dotted() (segs, n int, err error) {
	for {
		s.blanks()
		if s.i >= len(s.b) {
			return segs, n, nil
		}
		if c := s.b[s.i]; c == '"' || c == '\'' {
			l, err := s.str()
			if err != nil {
				return segs, n, err
			}
			n += l
		} else {
			start := s.i
			for s.i < len(s.b) && !keyStop(s.b[s.i]) {
				s.i++
			}
			if s.i == start {
				if c != '.' {
					return segs, n, nil // no key here: the parser says why
				}
			}
			n += s.i - start
		}
		segs++
		if n > MaxKeyPath {
			return segs, n, s.fail("a key path of %d bytes, above the limit of %d", n, MaxKeyPath)
		}
		s.blanks()
		if s.i < len(s.b) && s.b[s.i] == '.' {
			s.i++
			n++
			continue
		}
		return segs, n, nil
	}
}

func (s *scanner) blanks() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t') {
		s.i++
	}
}

func keyStop(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', '.', '=', '#', '[', ']', '{', '}', ',', '"', '\'':
		return true
	}
	return false
}

// scalar skips a number, boolean or date.
func (s *scanner) scalar() {
	start := s.i
	for s.i < len(s.b) && !keyStop(s.b[s.i]) || s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
	}
	if s.i == start {
		s.i++ // a byte that starts nothing: the parser refuses it
	}
}

// str skips a string of any of the four kinds (basic, literal, and their
// multi-line forms) and returns the length of its content. A single-line
// string ends at the end of its line even without its closing quote (the
// parser refuses it there).
func (s *scanner) str() (int, error) {
	q := s.b[s.i]
	line := s.line
	var n int
	if s.i+2 < len(s.b) && s.b[s.i+1] == q && s.b[s.i+2] == q {
		s.i += 3
		start := s.i
		end := len(s.b)
	multi:
		for s.i < len(s.b) {
			switch c := s.b[s.i]; {
			case c == '\\' && q == '"':
				s.i++
				if s.i < len(s.b) && s.b[s.i] == '\n' {
					if err := s.newline(); err != nil {
						return 0, err
					}
				}
				s.i++
			case c == '\n':
				if err := s.newline(); err != nil {
					return 0, err
				}
				s.i++
			case c == q:
				r := 0
				for s.i < len(s.b) && s.b[s.i] == q {
					s.i++
					r++
				}
				if r >= 3 {
					end = s.i - 3
					break multi
				}
			default:
				s.i++
			}
		}
		n = max(end, start) - start
	} else {
		s.i++
		start := s.i
		for s.i < len(s.b) && s.b[s.i] != q && s.b[s.i] != '\n' {
			if s.b[s.i] == '\\' && q == '"' && s.i+1 < len(s.b) && s.b[s.i+1] != '\n' {
				s.i++
			}
			s.i++
		}
		n = s.i - start
		if s.i < len(s.b) && s.b[s.i] == q {
			s.i++
		}
	}
	s.st.str = max(s.st.str, n)
	if n > MaxStringLen {
		return n, errdefs.Invalid(fmt.Sprintf("line %d", line), "a string of %d bytes, above the limit of %d", n, MaxStringLen)
	}
	return n, nil
}
