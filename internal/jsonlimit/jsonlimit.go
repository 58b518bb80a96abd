// Package jsonlimit measures a JSON document in one linear pass before it
// is decoded: its nesting depth and its number of values. encoding/json
// builds a value for each element it decodes, so a body of a few bytes a
// value ("[{},{},...]") would otherwise cost many times its size.
package jsonlimit

import "fmt"

// Limits of a JSON document.
type Limits struct {
	Depth  int // arrays and objects nested in one another
	Values int // values in the document: scalars, strings, arrays and objects (not the keys)
}

// Default is the limit of a request body.
var Default = Limits{Depth: 32, Values: 100_000}

// Error is a document over a limit.
type Error struct {
	Limit string // "depth" or "values"
	Max   int
	// Offset is the byte where the limit was passed.
	Offset int
}

func (e *Error) Error() string {
	if e.Limit == "depth" {
		return fmt.Sprintf("nested more than %d levels deep (the limit), at byte %d", e.Max, e.Offset)
	}
	return fmt.Sprintf("more than %d values (the limit), at byte %d", e.Max, e.Offset)
}

// Check measures b against l. It does not validate: a malformed document
// is left to the decoder, which refuses it at its first error, before
// which Check measured exactly what the decoder saw.
func Check(b []byte, l Limits) error {
	// inObj[d]: the container at depth d is an object, where a string
	// after '{' or ',' is a key, not a value.
	inObj := make([]bool, l.Depth+1)
	depth, values := 0, 0
	key := false // a string here is an object's key
	value := func(i int) error {
		values++
		if values > l.Values {
			return &Error{Limit: "values", Max: l.Values, Offset: i}
		}
		return nil
	}
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case ' ', '\t', '\r', '\n', ':':
			if c == ':' {
				key = false
			}
		case ',':
			key = depth > 0 && inObj[depth]
		case '{', '[':
			if err := value(i); err != nil {
				return err
			}
			if depth == l.Depth {
				return &Error{Limit: "depth", Max: l.Depth, Offset: i}
			}
			depth++
			inObj[depth] = c == '{'
			key = c == '{'
		case '}', ']':
			if depth > 0 {
				depth--
			}
			key = false
		case '"':
			if !key {
				if err := value(i); err != nil {
					return err
				}
			}
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			key = false
		default:
			if err := value(i); err != nil {
				return err
			}
			for i+1 < len(b) && scalar(b[i+1]) {
				i++
			}
			key = false
		}
	}
	return nil
}

// scalar reports whether c continues a number, true, false or null.
func scalar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '+' || c == '-'
}
