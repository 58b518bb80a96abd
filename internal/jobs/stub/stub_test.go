package stub

import (
	"bytes"
	"io"
	"testing"
)

// TestReadCmd: the command is read without reading past it, so what
// follows on stdin is the step's; a bad header is refused.
func TestReadCmd(t *testing.T) {
	c := Cmd{Args: []string{"sh", "-c", "cat"}, Env: []string{"A=1"}, Cwd: "/work"}
	r := bytes.NewReader(append(Encode(c), "the step's stdin"...))
	got, err := readCmd(r, make([]byte, 4))
	if err != nil || got.Cwd != "/work" || len(got.Args) != 3 || got.Env[0] != "A=1" {
		t.Fatalf("read %+v %v", got, err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "the step's stdin" {
		t.Fatalf("stdin after the command: %q", rest)
	}
	for _, bad := range [][]byte{{0, 0}, {0xff, 0xff, 0xff, 0xff}, {0, 0, 0, 2, '{', '}'}, {0, 0, 0, 9, '{'}} {
		if _, err := readCmd(bytes.NewReader(bad), make([]byte, 4)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
