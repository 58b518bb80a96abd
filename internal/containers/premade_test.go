package containers

import (
	"bytes"
	"os"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/sandbox/stub"
)

// pipes returns a container's stdout and stderr as held (read ahead) and
// the ends the container writes to.
func pipes(t *testing.T) (out, errh *held, outW, errW *os.File) {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, f := range []*os.File{outR, outW, errR, errW} {
			f.Close()
		}
	})
	return hold(outR), hold(errR), outW, errW
}

// A premade container's output is held back until its command surely
// runs: output on stdout, output on stderr other than shoal-init's
// failure line, or its end; shoal-init's failure (its line, then exit
// 127) is the run's error, with nothing of it streamed.
func TestGate(t *testing.T) {
	t.Run("stdout first", func(t *testing.T) {
		out, errh, outW, _ := pipes(t)
		outW.Write([]byte("hello\n"))
		if w, failed := gate(out, errh, make(chan waited)); w != nil || failed != "" {
			t.Fatalf("gate = %v, %q; want the command running", w, failed)
		}
		var b bytes.Buffer
		outW.Write([]byte("more\n"))
		outW.Close()
		out.copyTo(&b)
		if b.String() != "hello\nmore\n" {
			t.Fatalf("stdout %q, want what was held and the rest", b.String())
		}
	})
	t.Run("stderr first", func(t *testing.T) {
		out, errh, _, errW := pipes(t)
		errW.Write([]byte("warning\n"))
		if w, failed := gate(out, errh, make(chan waited)); w != nil || failed != "" {
			t.Fatalf("gate = %v, %q; want the command running", w, failed)
		}
	})
	t.Run("silent until its end", func(t *testing.T) {
		out, errh, outW, errW := pipes(t)
		done := make(chan waited, 1)
		outW.Close()
		errW.Close()
		done <- waited{exit: types.Exit{Code: 3}}
		w, failed := gate(out, errh, done)
		if w == nil || w.exit.Code != 3 || failed != "" {
			t.Fatalf("gate = %+v, %q; want its end, exit 3", w, failed)
		}
	})
	t.Run("shoal-init cannot run it", func(t *testing.T) {
		out, errh, outW, errW := pipes(t)
		errW.Write([]byte(stub.Failed + `"nosuch": executable file not found in $PATH` + "\n"))
		outW.Close()
		errW.Close()
		done := make(chan waited, 1)
		done <- waited{exit: types.Exit{Code: 127}}
		w, failed := gate(out, errh, done)
		if w == nil || failed != `cannot run "nosuch": executable file not found in $PATH` {
			t.Fatalf("gate = %+v, %q; want shoal-init's reason", w, failed)
		}
	})
	t.Run("the same line from a command that exits 0", func(t *testing.T) {
		out, errh, outW, errW := pipes(t)
		errW.Write([]byte(stub.Failed + "\"x\": said by the command\n"))
		outW.Close()
		errW.Close()
		done := make(chan waited, 1)
		done <- waited{exit: types.Exit{Code: 0}}
		w, failed := gate(out, errh, done)
		if w == nil || failed != "" {
			t.Fatalf("gate = %+v, %q; want an ordinary end", w, failed)
		}
		var b bytes.Buffer
		errh.copyTo(&b)
		if b.String() != stub.Failed+"\"x\": said by the command\n" {
			t.Fatalf("stderr %q, want the command's line", b.String())
		}
	})
}

// The shapes run most recently keep their premade container, at most
// PremadeShapes of them; another run of a shape makes it the most recent.
func TestPremadeShapesBounded(t *testing.T) {
	s := &Service{}
	s.pool.ready, s.pool.work = map[shape]*premade{}, map[chan struct{}]string{}
	shapes := make([]shape, PremadeShapes+1)
	for i := range shapes {
		shapes[i] = shape{digest: "sha256:a", mode: network.None, limits: runtime.Limits{Pids: int64(i + 1)}}
	}
	for _, sh := range shapes[:PremadeShapes] {
		s.touch(sh)
	}
	s.touch(shapes[0])
	s.touch(shapes[PremadeShapes])
	if len(s.pool.recent) != PremadeShapes || s.pool.recent[0] != shapes[PremadeShapes] || s.pool.recent[1] != shapes[0] {
		t.Fatalf("recent shapes %v", s.pool.recent)
	}
	for _, sh := range s.pool.recent {
		if sh == shapes[1] {
			t.Fatalf("the least recently run shape %v is kept", sh)
		}
	}
}
